"""The evaluation report command: every file written from a real checkpoint, clear errors."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("solo", reason="needs upstream solo-learn installed")
pytest.importorskip("matplotlib", reason="the report pictures need matplotlib")

from helpers import untrained_checkpoint  # noqa: E402
from PIL import Image  # noqa: E402

import solo_bayesncl  # noqa: E402,F401
from solo_bayesncl.cli.evaluate import main  # noqa: E402
from solo_bayesncl.evaluation.report import (  # noqa: E402
    REPORT_FILES,
    ReportError,
    ReportOptions,
    write_report,
)
from solo_bayesncl.io.checkpoints import CheckpointError  # noqa: E402

NUM_DIMS = 64


def _checkpoint(folder: Path, config: str, image_folder: Path) -> Path:
    """A solo-learn-layout checkpoint (``.ckpt`` + ``args.json``) of an untrained model."""
    return untrained_checkpoint(folder, config, image_folder, 32, NUM_DIMS)


@pytest.fixture(scope="module")
def checkpoints(image_folder, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("runs")
    return {
        name: _checkpoint(root / name, f"{name}.yaml", image_folder) for name in ("bayesncl", "ncl")
    }


def _valid_png(path: Path) -> tuple[int, int]:
    with Image.open(path) as image:
        image.verify()
    with Image.open(path) as image:
        assert image.format == "PNG"
        return image.size


@pytest.fixture(scope="module")
def bayesncl_report(checkpoints, image_folder, tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("reports") / "bayesncl"
    report = write_report(
        checkpoints["bayesncl"],
        out,
        ReportOptions(
            dataset=image_folder / "val",
            batch_size=8,
            num_workers=0,
            top_dims=6,
            images_per_dim=5,
            shuffle_permutations=2,
        ),
        progress=False,
    )
    return out, report


def test_bayesncl_report_writes_every_file(bayesncl_report, image_folder):
    out, report = bayesncl_report
    n_val = len(list((image_folder / "val").rglob("*.png")))
    for name in (*REPORT_FILES, "gate_open_rates.png"):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
        if name.endswith(".png"):
            width, height = _valid_png(out / name)
            assert width > 100 and height > 100, name
    saved = json.loads((out / "metrics.json").read_text())
    assert saved == json.loads(json.dumps(report))
    assert saved["method"] == "bayesncl" and saved["num_images"] == n_val
    assert str(image_folder / "val") in saved["dataset"]
    for key in ("metrics", "metrics_soft_gate"):
        metrics = saved[key]
        assert metrics["num_samples"] == n_val and metrics["num_dims"] == NUM_DIMS
        assert "semantic_consistency_shuffled" in metrics and "retrieval_p@1" in metrics
    # the soft gate closes nothing: only phi's zeros remain, never more than the hard gate's
    hard, soft = saved["metrics"], saved["metrics_soft_gate"]
    assert soft["active_dims"] >= hard["active_dims"] and soft["sparsity"] <= hard["sparsity"]
    gate = saved["gate_open_rate"]
    assert 0.0 <= gate["min"] <= gate["mean"] <= gate["max"] <= 1.0
    assert len(saved["top_dimensions"]) <= 6
    assert len(saved["least_selective_dimensions"]) <= 6
    markdown = (out / "metrics.md").read_text()
    assert "| metric | hard gate | soft gate |" in markdown
    assert "label-shuffled baseline" in markdown and "zeroes no entry" in markdown


def _top_images(feats: np.ndarray, active: np.ndarray, dim: int, count: int) -> list[int]:
    """The images ``dim`` is active on, largest |activation| first, lower index on ties."""
    firing = np.flatnonzero(active[:, dim]).tolist()
    return sorted(firing, key=lambda i: (-abs(float(feats[i, dim])), i))[:count]


def test_report_leads_with_the_best_evidenced_dimensions(bayesncl_report):
    """Dimensions are listed by evidence (the Wilson lower bound of the purity over the images a
    dimension fires on, those firing on under 1% of the images last), the weakest-evidenced ones
    are a second list and picture, and each shows the purity of its top images beside its purity
    over all active images, all recomputed here from features.npz."""
    from solo_bayesncl.dashboard.bundle import load_feature_bundle
    from solo_bayesncl.metrics import SIGNIFICANCE, majority_p_values

    out, report = bayesncl_report
    bundle = load_feature_bundle(out)
    feats = bundle.features.astype(np.float32)
    labels = bundle.labels
    p = majority_p_values(torch.from_numpy(feats), torch.from_numpy(labels), 6).numpy()
    norm = np.linalg.norm(feats, axis=1, keepdims=True)
    active = np.abs(feats / np.maximum(norm, 1e-12)) > 1e-5
    n_images = len(labels)

    def key(r):
        n, share, z = r["active_images"], r["purity"], 1.96
        bound = (
            share + z * z / (2 * n) - z * math.sqrt(share * (1 - share) / n + z * z / (4 * n * n))
        ) / (1 + z * z / n)
        return (n < 0.01 * n_images, -round(bound, 12), -n, r["dim"])

    rows = report["top_dimensions"]
    assert rows and [key(r) for r in rows] == sorted(key(r) for r in rows)
    least = report["least_selective_dimensions"]
    assert [key(r) for r in least] == sorted((key(r) for r in least), reverse=True)
    for r in rows + least:
        d = r["dim"]
        counts = np.bincount(labels[active[:, d]], minlength=6)
        assert r["active_images"] == counts.sum()
        assert r["purity"] == pytest.approx(counts.max() / counts.sum())
        assert r["majority_significant"] == (p[d] <= SIGNIFICANCE)
        majority = int(np.argmax(counts))
        top = _top_images(feats, active, d, 5)
        assert r["purity_top"] == pytest.approx((labels[top] == majority).mean())
    assert (out / "least_selective_activations.png").is_file()
    markdown = (out / "metrics.md").read_text()
    assert (
        "## Most selective dimensions" in markdown and "## Least selective dimensions" in markdown
    )
    assert "purity (top 5 images) | purity (all active)" in markdown
    for r in rows:
        if not r["majority_significant"]:
            assert f"| {r['dim']} | {r['majority_class']} (n.s.) |" in markdown


def test_report_and_dashboard_agree_on_the_purity_of_the_top_images(
    checkpoints, image_folder, tmp_path
):
    """Issue 25 (9): a report and the dashboard built from it, both with their defaults, give
    every dimension the same purity of its top images, over the same number of images (the
    ones a card shows), each equal to a loop over features.npz."""
    from solo_bayesncl.dashboard import build_dashboard, load_feature_bundle

    out = tmp_path / "report"
    report = write_report(
        checkpoints["ncl"],
        out,
        ReportOptions(
            dataset=image_folder / "val",
            batch_size=12,
            num_workers=0,
            top_dims=NUM_DIMS,
            shuffle_permutations=1,
        ),
        progress=False,
    )
    build_dashboard(out, tmp_path / "dashboard", thumb_format="png")
    text = (tmp_path / "dashboard" / "data.js").read_text(encoding="utf-8")
    data = json.loads(text.split("=", 1)[1].rstrip().rstrip(";"))
    count = report["selectivity"]["top_images"]
    assert count == data["meta"]["top_purity_images"] == 8
    assert "purity (top 8 images)" in (out / "metrics.md").read_text()

    bundle = load_feature_bundle(out)
    feats, labels = bundle.features.astype(np.float32), bundle.labels
    norm = np.linalg.norm(feats, axis=1, keepdims=True)
    active = np.abs(feats / np.maximum(norm, 1e-12)) > 1e-5
    shown = dict(zip(data["dims"]["id"], data["dims"]["top_purity"], strict=True))
    rows = report["top_dimensions"] + report["least_selective_dimensions"]
    assert len({r["dim"] for r in rows}) > 8
    for r in rows:
        d = r["dim"]
        majority = int(np.argmax(np.bincount(labels[active[:, d]], minlength=6)))
        top = _top_images(feats, active, d, count)
        expected = float((labels[top] == majority).mean())
        assert r["purity_top"] == pytest.approx(expected), d
        assert shown[d] == pytest.approx(expected, abs=1e-4), d


def test_bundle_matches_the_metrics_and_feeds_the_dashboard(bayesncl_report):
    from solo_bayesncl.dashboard.bundle import load_feature_bundle
    from solo_bayesncl.metrics import compute_interpretability_metrics

    out, report = bayesncl_report
    bundle = load_feature_bundle(out)
    n_classes = len(bundle.class_names)
    n_val = 6 * n_classes  # the image_folder fixture: 6 validation images per class
    assert bundle.method == "bayesncl"
    assert bundle.features.shape == (n_val, NUM_DIMS)
    assert bundle.class_names == [f"class{i}" for i in range(n_classes)] and n_classes >= 5
    assert sorted(np.bincount(bundle.labels).tolist()) == [6] * n_classes
    assert bundle.thumbnails.shape[0] == n_val and bundle.thumbnails.dtype == np.uint8
    assert bundle.thumbnails.max() > 100  # un-normalised images, not a black square
    assert bundle.gate_open_rate is not None and bundle.gate_open_rate.shape == (NUM_DIMS,)
    again = compute_interpretability_metrics(
        torch.from_numpy(bundle.features), torch.from_numpy(bundle.labels), n_classes
    )
    for key in ("sparsity", "active_dims", "semantic_consistency", "retrieval_p@5"):
        assert again[key] == pytest.approx(report["metrics"][key], abs=1e-6), key


def test_ncl_report_has_no_gate_picture(checkpoints, image_folder, tmp_path):
    out = tmp_path / "ncl"
    options = ReportOptions(
        batch_size=16, max_images=10, num_workers=0, top_dims=4, shuffle_permutations=1
    )
    report = write_report(checkpoints["ncl"], out, options, progress=False)
    for name in REPORT_FILES:
        assert (out / name).is_file(), name
    assert not (out / "gate_open_rates.png").exists()
    assert report["num_images"] == 10 and "metrics_soft_gate" not in report
    assert "gate_open_rates.png: not drawn, ncl has no gate" in (out / "metrics.md").read_text()


def test_refuses_a_non_empty_report_folder(checkpoints, tmp_path):
    (tmp_path / "old.txt").write_text("keep me")
    with pytest.raises(ReportError, match=f"{tmp_path}.*--overwrite"):
        write_report(checkpoints["ncl"], tmp_path, progress=False)
    assert (tmp_path / "old.txt").read_text() == "keep me"


def test_missing_checkpoint_is_a_clear_error(tmp_path, capsys):
    missing = tmp_path / "nowhere" / "last.ckpt"
    with pytest.raises(CheckpointError, match=f"checkpoint {missing} does not exist"):
        write_report(missing, tmp_path / "out", progress=False)
    assert main([str(missing), "--out", str(tmp_path / "out")]) == 2
    assert f"error: checkpoint {missing} does not exist" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_unknown_method_is_a_clear_error(checkpoints, tmp_path, capsys):
    folder = tmp_path / "byol"
    folder.mkdir()
    path = folder / "last.ckpt"
    path.write_bytes(checkpoints["ncl"].read_bytes())
    args = json.loads((checkpoints["ncl"].parent / "args.json").read_text())
    args["method"] = "byol"
    (folder / "args.json").write_text(json.dumps(args))
    pattern = rf"{path}: method 'byol' is not supported; allowed: simclr, mocov2plus, ncl, bayesncl"
    with pytest.raises(CheckpointError, match=pattern):
        write_report(path, tmp_path / "out", progress=False)
    assert main([str(path), "--out", str(tmp_path / "out2")]) == 2
    assert "method 'byol' is not supported" in capsys.readouterr().err


def test_paper_protocol_adds_the_official_figures(checkpoints, image_folder, tmp_path):
    from solo_bayesncl.metrics.paper_protocol import RETRIEVAL_DIMS

    out = tmp_path / "paper"
    code = main(
        [
            str(checkpoints["bayesncl"]),
            "--out",
            str(out),
            "--batch-size",
            "8",
            "--num-workers",
            "0",
            "--shuffle-permutations",
            "1",
            "--no-progress",
            "--protocol",
            "paper",
        ]
    )
    assert code == 0
    report = json.loads((out / "metrics.json").read_text())
    paper = report["metrics_paper"]
    assert report["protocol"] == "paper" and report["paper_protocol"]["batch_size"] == 8
    assert paper["paper_semantic_consistency_x100"] == pytest.approx(
        100 * paper["paper_semantic_consistency"]
    )
    assert 0 < paper["paper_semantic_consistency"] <= 1
    assert paper["paper_singular_value_entropy"] > 0  # one training batch of the image folder
    assert all(f"paper_retrieval_p@10_m{m}" in paper for m in RETRIEVAL_DIMS)
    assert report["metrics"]["semantic_consistency"] is not None  # the standard figures stay
    assert "## Paper protocol" in (out / "metrics.md").read_text()


def test_ncl_paper_protocol_reports_the_ncl_formulas_on_relu_z(checkpoints, tmp_path):
    """``--protocol ncl-paper``: NCL's formulas on ``relu(z)``, not normalised, BatchNorm on the
    statistics of each unshuffled batch; recomputed here from the model by hand."""
    import copy

    from torch.utils.data import DataLoader

    from solo_bayesncl.data.datasets import build_val_dataset, validation_transform
    from solo_bayesncl.io.checkpoints import load_checkpoint, load_method
    from solo_bayesncl.metrics.ncl_paper_protocol import ncl_paper_metrics

    out = tmp_path / "ncl"
    args = [str(checkpoints["ncl"]), "--out", str(out), "--batch-size", "8"]
    args += ["--num-workers", "0", "--no-progress", "--protocol", "ncl-paper"]
    assert main(args) == 0
    report = json.loads((out / "metrics.json").read_text())
    assert report["protocol"] == "ncl-paper" and "metrics_paper" not in report
    loaded = load_checkpoint(checkpoints["ncl"])
    model = copy.deepcopy(load_method(loaded, device="cpu")).train()
    val = build_val_dataset(loaded.spec.data, validation_transform(loaded.spec.data))
    features, labels = [], []
    with torch.no_grad():
        for x, y in DataLoader(val, batch_size=8, shuffle=False):
            features.append(torch.relu(model(x)["z"].float()))
            labels.append(y)
    want = ncl_paper_metrics(torch.cat(features), torch.cat(labels))
    got = report["metrics_ncl_paper"]
    assert set(got) == set(want)
    assert f"ncl_paper_retrieval_p@10_m{NUM_DIMS - 32}" in got
    for key, value in want.items():
        if math.isnan(value):  # written as null (strict JSON)
            assert got[key] is None, key
        else:
            assert got[key] == pytest.approx(value, rel=1e-4, abs=1e-6), key
    assert "## NCL paper protocol" in (out / "metrics.md").read_text()


def test_standard_protocol_has_no_paper_figures_and_bad_protocol_is_named(checkpoints, tmp_path):
    options = ReportOptions(batch_size=16, num_workers=0)
    report = write_report(checkpoints["ncl"], tmp_path / "std", options, progress=False)
    assert "metrics_paper" not in report
    allowed = "allowed values: standard, paper, ncl-paper"
    with pytest.raises(ReportError, match=f"protocol='exact' is not supported; {allowed}"):
        ReportOptions(protocol="exact")
    assert not (tmp_path / "bad").exists()


def test_zoo_export_takes_the_report_as_written(bayesncl_report, tmp_path, capsys):
    """``zoo export CKPT --metrics REPORT/metrics.json``: the report's strings and lists are not
    figures; its numbers become the entry's metrics (soft gate prefixed, n/a left out)."""
    from solo_bayesncl.cli.zoo import main as zoo_main

    out, report = bayesncl_report
    code = zoo_main(
        [
            "export",
            report["checkpoint"],
            "--name",
            "bayesncl-report-test",
            "--out",
            str(tmp_path),
            "--metrics",
            str(out / "metrics.json"),
        ]
    )
    assert code == 0, capsys.readouterr().err
    entry = json.loads((tmp_path / "bayesncl-report-test.entry.json").read_text())
    hard = {k: v for k, v in report["metrics"].items() if v is not None}
    soft = {f"soft_gate/{k}": v for k, v in report["metrics_soft_gate"].items() if v is not None}
    assert entry["metrics"] == {**hard, **soft}
    assert entry["metrics"]["semantic_consistency"] == report["metrics"]["semantic_consistency"]
