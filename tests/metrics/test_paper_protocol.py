"""The ``paper`` protocol equals the official BayesNCL evaluation.

``_official_*`` below is a small loop-by-loop rewrite of the official evaluation's formulas (its
``main_eval.py`` and ``solo/methods/bayesncl_eval_helper_functions.py``), written from reading
them; the vectorised functions of :mod:`solo_bayesncl.metrics.paper_protocol` must agree."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from solo_bayesncl.metrics.paper_protocol import (
    RETRIEVAL_DIMS,
    paper_active_dims,
    paper_metrics,
    paper_orthogonality,
    paper_retrieval,
    paper_semantic_consistency,
    paper_semantic_entropies,
    paper_singular_value_entropy,
    paper_sparsity,
)

EPS = 1e-5

# ---------------------------------------------------------------- the official formulas, looped


def _official_consistency(f: torch.Tensor, y: torch.Tensor) -> float:
    f = F.normalize(f[:, f.abs().sum(0) > 0], dim=1)
    shares = []
    for i in range(f.shape[1]):
        chosen = y[f[:, i].abs() > EPS]
        if chosen.numel() == 0:  # the official bincount().max() raises and the dim is skipped
            continue
        dist = chosen.bincount().float()
        shares.append((dist / dist.sum()).max().item())
    return torch.tensor(shares).mean().item()


def _entropy(weights: torch.Tensor) -> float | None:
    total = weights.sum()
    if total < EPS:
        return None
    p = weights / total
    p = p[p > EPS]
    return float(-(p * torch.log(p)).sum()) if len(p) else None


def _official_entropies(f: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
    f = f[:, f.abs().sum(0) > EPS]
    _, idx = torch.unique(y, return_inverse=True)
    counts = torch.bincount(idx).float() + EPS
    found: dict[str, list[float]] = {"sum_activation": [], "mean_activation": [], "frequency": []}
    for i in range(f.shape[1]):
        col = f[:, i].abs()
        sums = torch.bincount(idx, weights=col)
        for name, weights in (
            ("sum_activation", sums),
            ("mean_activation", sums / counts),
            ("frequency", torch.bincount(idx, weights=(col > EPS).float())),
        ):
            h = _entropy(weights)
            if h is not None:
                found[name].append(h)
    return {k: (float(torch.tensor(v).mean()) if v else 0.0) for k, v in found.items()}


def _official_orthogonality(f: torch.Tensor) -> tuple[float, float]:
    f = F.normalize(f[:, f.abs().sum(0) > 0], dim=0)
    d = f.shape[1]
    err = (f.T @ f - torch.eye(d)).abs() / (d * (d - 1))
    return err.mean().item(), err.median().item()


def _official_retrieval(f: torch.Tensor, y: torch.Tensor) -> dict[int, dict[int, float]]:
    n = f.shape[0]
    f = F.normalize(f, p=2, dim=1)
    _, order = torch.sort(torch.sum(f, dim=0), descending=True)
    table = {}
    for m in range(0, 512 + 32, 32):
        sub = F.normalize(f[:, order[0:m]], p=2, dim=1)
        neighbours = torch.topk(sub @ sub.t(), k=11, dim=1)[1][:, 1:]
        correct = y[neighbours] == y.view(-1, 1)
        table[m] = {k: (correct[:, :k].sum().float() / (n * k)).item() for k in (1, 3, 5, 10)}
    return table


def _official_erank(z: torch.Tensor) -> float:
    s = torch.linalg.svdvals(z.float())
    s = s / s.sum()
    return float(-torch.sum(s * torch.log(s + 1e-6)))


# ---------------------------------------------------------------- data


def _features(kind: str, n: int = 150, d: int = 40, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 7, (n,), generator=g)
    z = torch.randn(n, d, generator=g) + 0.8 * F.one_hot(y % d, d).float() * 3
    if kind == "nonneg":  # NCL-like: ReLU zeros, a dead dimension, a sample with no active dim
        z = F.relu(z - 0.5)
        z[:, 3] = 0.0
        z[5] = 0.0
    elif kind == "gated":  # BayesNCL-like: tiny values just under and over the threshold
        z = F.relu(z) * (torch.rand(n, d, generator=g) > 0.6)
        z[:, 7] = 1e-7
    return F.normalize(z, dim=1), y


KINDS = ("signed", "nonneg", "gated")


@pytest.mark.parametrize("kind", KINDS)
def test_consistency_and_entropies_equal_the_official_loops(kind):
    f, y = _features(kind)
    assert paper_semantic_consistency(f, y) == pytest.approx(_official_consistency(f, y), abs=1e-6)
    ours = paper_semantic_entropies(f, y)
    for name, value in _official_entropies(f, y).items():
        assert ours[name] == pytest.approx(value, abs=1e-5), name


def test_consistency_with_labels_that_skip_values():
    f, y = _features("nonneg")
    y = y * 3 + 2  # classes 2, 5, 8, ...: the official bincount has empty bins
    assert paper_semantic_consistency(f, y) == pytest.approx(_official_consistency(f, y), abs=1e-6)


@pytest.mark.parametrize("kind", KINDS)
def test_counts_orthogonality_and_erank_equal_the_official_formulas(kind):
    f, _ = _features(kind)
    assert paper_active_dims(f) == float((f.abs().mean(dim=0) > 0).float().sum())
    assert paper_sparsity(f) == pytest.approx(1 - (f.abs() > EPS).float().mean().item())
    mean, median = _official_orthogonality(f)
    ortho = paper_orthogonality(f)
    assert ortho["mean"] == pytest.approx(mean, rel=1e-5)
    assert ortho["median"] == pytest.approx(median, rel=1e-5)
    assert paper_singular_value_entropy(f) == pytest.approx(_official_erank(f), rel=1e-5)


def test_orthogonality_is_divided_by_d_twice():
    """Two equal columns: |C - I| has two off-diagonal ones; the official figure is
    (2 / (d (d - 1))) / d^2 with d = 2, i.e. 1/4, not the mean |cos| of 1."""
    f = torch.tensor([[1.0, 1.0], [2.0, 2.0]])
    assert paper_orthogonality(f)["mean"] == pytest.approx(2 / 2 / 4)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("chunk", [7, 1024])
def test_retrieval_equals_the_official_table(kind, chunk):
    f, y = _features(kind, n=90)
    ours = paper_retrieval(f, y, chunk_size=chunk)
    official = _official_retrieval(f, y)
    assert list(ours) == list(RETRIEVAL_DIMS)
    for m in RETRIEVAL_DIMS[1:]:  # m = 0: zero vectors, every neighbour a tie
        for k in (1, 3, 5, 10):
            assert ours[m][k] == pytest.approx(official[m][k], abs=1e-6), (m, k)


def test_retrieval_needs_eleven_vectors():
    with pytest.raises(ValueError, match="at least 11 vectors, got 10"):
        paper_retrieval(torch.rand(10, 4), torch.zeros(10, dtype=torch.long))


def test_metrics_report_consistency_x100():
    f, y = _features("nonneg")
    metrics = paper_metrics(f, y)
    share = metrics["paper_semantic_consistency"]
    assert metrics["paper_semantic_consistency_x100"] == pytest.approx(100 * share)
    assert 0 < share <= 1 and "paper_retrieval_p@10_m512" in metrics


# ---------------------------------------------------------------- the evaluation pass


class _TinyNCL(nn.Module):
    """A backbone with BatchNorm and an NCL-like ``representation`` (ReLU, normalise)."""

    non_neg = "relu"

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(12, 8), nn.BatchNorm1d(8))

    def forward(self, x):
        return {"z": self.net(x)}

    def representation(self, out, gate="hard"):
        return F.normalize(F.relu(out["z"]), dim=-1)


class _Images(torch.utils.data.Dataset):
    def __init__(self, n: int = 40) -> None:
        g = torch.Generator().manual_seed(3)
        self.x = torch.randn(n, 3, 2, 2, generator=g)
        self.y = torch.arange(n) // 10  # class-sorted, as an image folder

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], int(self.y[i])


def test_paper_pass_uses_batch_statistics_in_dataset_order_and_leaves_the_model():
    pytest.importorskip("solo", reason="needs upstream solo-learn installed")
    from solo_bayesncl.config.settings import saved_run_spec
    from solo_bayesncl.evaluation.paper import evaluate_paper_protocol

    torch.manual_seed(0)
    model = _TinyNCL().eval()
    with torch.no_grad():  # running statistics far from any batch's
        model.net[2].running_mean.fill_(5.0)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    data = _Images()
    spec = saved_run_spec({"data": {"dataset": "custom"}})

    import solo_bayesncl.evaluation.paper as paper

    captured = {}
    real = paper.paper_metrics

    def spy(features, labels):
        captured["features"], captured["labels"] = features, labels
        return real(features, labels)

    paper.paper_metrics = spy
    try:
        result = evaluate_paper_protocol(
            model,
            spec,
            lambda transform: data,
            batch_size=16,
            num_workers=0,
            device="cpu",
        )
    finally:
        paper.paper_metrics = real
    # the official pass: training mode, batches of 16 in dataset order, no shuffling
    reference = _TinyNCL()
    reference.load_state_dict(before)
    reference.train()
    with torch.no_grad():
        expected = torch.cat(
            [reference.representation(reference(data.x[i : i + 16])) for i in range(0, 40, 16)]
        )
    torch.testing.assert_close(captured["features"], expected)
    assert torch.equal(captured["labels"], data.y)
    with torch.no_grad():
        eval_mode = model.representation(model(data.x))
    assert not torch.allclose(eval_mode, expected, atol=1e-3)  # the protocols do differ here
    for key, value in model.state_dict().items():  # the caller's model is untouched
        assert torch.equal(value, before[key]), key
    assert not model.training
    assert math.isnan(result["metrics"]["paper_singular_value_entropy"])  # no training data
    assert result["settings"]["batch_size"] == 16


# ---------------------------------------------------------------- the benchmark table


def _result(method: str, paper: bool) -> dict:
    result = {
        "method": method,
        "seed": 5,
        "linear_top1": 50.0,
        "linear_probe": "linear.yaml: lars lr 0.4, warmup_cosine, 50 epochs, batch 256",
        "metrics": {"semantic_consistency": 0.2202, "active_dims": 100.0},
    }
    if paper:
        result["metrics_paper"] = {
            "paper_semantic_consistency_x100": 22.02,
            "paper_orthogonality_mean": 1.5e-7,
        }
    return result


@pytest.mark.parametrize("paper", [False, True])
def test_table_shows_paper_columns_only_with_the_paper_protocol(paper, tmp_path):
    from solo_bayesncl.benchmark.table import aggregate, write_csv, write_markdown

    rows = aggregate([_result("ncl", paper), _result("bayesncl", paper)])
    md = write_markdown(rows, tmp_path / "t.md", "unit", "abc", "2026-11-30").read_text()
    header = next(line for line in md.splitlines() if line.startswith("| method"))
    assert ("paper_consistency_x100" in header) is paper
    assert "semantic_consistency" in header  # the standard column is always there
    if paper:
        assert "| 0.220 |" in md and "| 22.02 |" in md and "1.50e-07" in md
    assert "Linear probe: `linear.yaml: lars lr 0.4, warmup_cosine, 50 epochs" in md
    csv_text = write_csv(rows, tmp_path / "t.csv", "abc", "2026-11-30").read_text()
    assert "linear_probe" in csv_text.splitlines()[0]


@pytest.mark.long
@pytest.mark.slow
@pytest.mark.solo
def test_benchmark_protocol_paper_adds_only_the_missing_stage(image_folder, tmp_path):
    from helpers import tiny_preset_file

    from solo_bayesncl.benchmark.presets import load_preset
    from solo_bayesncl.benchmark.runner import run_benchmark

    preset_file = tiny_preset_file(
        tmp_path / "tiny.yaml",
        image_folder,
        tmp_path / "results",
        linear={"config": "linear.yaml", "max_epochs": 1, "batch_size": 8},
    )
    preset = load_preset(preset_file)
    standard = run_benchmark(preset, log=lambda _: None)
    assert all("metrics_paper" not in r for r in standard)
    assert all(r["linear_probe"].startswith("linear.yaml: lars lr 0.4") for r in standard)
    out = tmp_path / "results"
    header = (out / "results.md").read_text().splitlines()[2]
    assert "paper_consistency_x100" not in header
    pretrained = {p: p.stat().st_mtime_ns for p in out.glob("runs/*/pretrain.json")}

    log: list[str] = []
    paper = run_benchmark(preset, log=log.append, protocol="paper")
    assert sum(line.startswith("[run]") for line in log) == 1  # the report stage only
    assert {p: p.stat().st_mtime_ns for p in out.glob("runs/*/pretrain.json")} == pretrained
    for result in paper:
        share = result["metrics_paper"]["paper_semantic_consistency"]
        assert result["metrics_paper"]["paper_semantic_consistency_x100"] == pytest.approx(
            100 * share
        )
    md = (out / "results.md").read_text()
    assert "paper_consistency_x100" in md.splitlines()[2] and "`paper_*` columns" in md
