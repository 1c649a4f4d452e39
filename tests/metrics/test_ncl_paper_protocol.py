"""The ``ncl-paper`` protocol equals the NCL repository's evaluation.

``_ncl_*`` below is a small loop-by-loop rewrite of the formulas of the NCL repository's
``main_eval.py`` (PKU-ML/non_neg), written from reading it; the vectorised functions of
:mod:`solo_bayesncl.metrics.ncl_paper_protocol` must agree."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from solo_bayesncl.metrics.ncl_paper_protocol import (
    ncl_paper_metrics,
    ncl_paper_orthogonality,
    ncl_paper_retrieval,
    ncl_paper_semantic_consistency,
    ncl_paper_sparsity,
)

# ---------------------------------------------------------------- the NCL formulas, looped


def _ncl_sparsity(f: torch.Tensor) -> float:
    per_sample = []
    for row in f:
        zeros = sum(1 for v in row.tolist() if abs(v) < 1e-2)
        per_sample.append(100.0 * zeros / len(row))
    return sum(per_sample) / len(per_sample)


def _ncl_cluster(f: torch.Tensor, y: torch.Tensor) -> tuple[list[float], list[float]]:
    keep = [i for i in range(f.shape[1]) if F.relu(f[:, i]).sum() > 0]
    g = F.normalize(f[:, keep], dim=1)
    shares, entropies = [], []
    for i in range(g.shape[1]):
        chosen = [int(y[n]) for n in range(g.shape[0]) if abs(float(g[n, i])) > 1e-5]
        if not chosen:  # the NCL code's bincount().max() raises and the dim is skipped
            continue
        counts = [chosen.count(c) for c in range(max(chosen) + 1)]
        p = [c / len(chosen) for c in counts]
        shares.append(100 * max(p))
        entropies.append(-sum(q * math.log(q + 1e-5) for q in p))
    return shares, entropies


def _ncl_orthogonality(f: torch.Tensor) -> float:
    keep = [i for i in range(f.shape[1]) if float(f[:, i].sum()) > 10]
    g = f[:, keep]
    g = g / g.norm(dim=0).clamp_min(1e-12)
    d = g.shape[1]
    entries = []
    for a in range(d):
        for b in range(d):
            c = float((g[:, a] * g[:, b]).sum())
            entries.append(abs(c - (1.0 if a == b else 0.0)))
    entries.sort()
    return entries[(len(entries) - 1) // 2]  # torch's median: the lower middle value


def _ncl_retrieval(f: torch.Tensor, y: torch.Tensor) -> dict[int, float]:
    n, d = f.shape
    g = F.normalize(f, dim=1)
    sums = g.sum(dim=0).tolist()
    order = sorted(range(d), key=lambda i: (-sums[i], i))
    out = {}
    for m in range(0, d, 32):
        sub = g[:, order[:m]]
        total = 0.0
        for i in range(n):
            dist = [float(((sub[j] - sub[i]) ** 2).sum()) for j in range(n)]
            ranked = sorted(range(n), key=lambda j: (dist[j], j))
            correct = 0
            for j in range(1, 11):
                if ranked[j] == i:
                    continue
                if int(y[ranked[j]]) == int(y[i]):
                    correct += 1
            total += correct / 10
        out[m] = total / n
    return out


# ---------------------------------------------------------------- data


def _features(seed: int, n: int = 40, d: int = 70, signed: bool = False):
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 4, (n,), generator=g)
    f = torch.randn(n, d, generator=g) * 3 + y[:, None].float() * (torch.arange(d) % 4 == 0)
    if not signed:
        f = F.relu(f)
        f[:, 5] = 0.0  # a dead dimension
        f[:, 6] = torch.where(f[:, 6] > 0.5, 0.005, 0.0)  # tiny: counts as zero for sparsity
    return f, y


@pytest.mark.parametrize("signed", [False, True])
@pytest.mark.parametrize("seed", [0, 1])
def test_every_formula_matches_the_ncl_code(seed, signed):
    f, y = _features(seed, signed=signed)
    assert ncl_paper_sparsity(f) == pytest.approx(_ncl_sparsity(f), abs=1e-4)
    shares, entropies = _ncl_cluster(f, y)
    got = ncl_paper_semantic_consistency(f, y)
    assert got["mean"] == pytest.approx(sum(shares) / len(shares), abs=1e-4)
    assert got["std"] == pytest.approx(float(torch.tensor(shares).std()), abs=1e-4)
    assert got["entropy_mean"] == pytest.approx(sum(entropies) / len(entropies), abs=1e-5)
    assert ncl_paper_orthogonality(f) == pytest.approx(_ncl_orthogonality(f), abs=1e-5)
    want = _ncl_retrieval(f, y)
    got_r = ncl_paper_retrieval(f, y, chunk_size=7)  # chunks must not change the result
    assert list(got_r) == [0, 32, 64] == list(want)
    for m in want:
        assert got_r[m] == pytest.approx(want[m], abs=1e-9), m


def test_the_figures_differ_from_the_bayesncl_evaluation_where_the_formulas_do():
    """Sparsity below 1e-2 (not 1e-5), in percent; orthogonality is a median over summing
    dimensions; m stops below d."""
    from solo_bayesncl.metrics.paper_protocol import paper_sparsity

    f, y = _features(0)
    metrics = ncl_paper_metrics(f, y)
    small = ((f.abs() > 1e-5) & (f.abs() < 1e-2)).float().mean()  # column 6's entries
    assert small > 0
    assert metrics["ncl_paper_sparsity_x100"] == pytest.approx(
        100 * (paper_sparsity(f) + float(small)), abs=1e-4
    )
    assert "ncl_paper_retrieval_p@10_m64" in metrics
    assert (
        "ncl_paper_retrieval_p@10_m70" not in metrics
        and "ncl_paper_retrieval_p@10_m96" not in metrics
    )
    assert math.isnan(ncl_paper_orthogonality(f * 0.01))  # no column sums above 10


def test_retrieval_counts_a_tied_query_as_a_miss():
    """m = 0 (every distance 0): the ten after the first by index, the query skipped."""
    y = torch.tensor([0] * 6 + [1] * 6)
    f = torch.rand(12, 8)
    got = ncl_paper_retrieval(f, y)[0]
    assert got == pytest.approx(_ncl_retrieval(f, y)[0])
    # query 0: ranks 1..10 are items 1..10: 5 of class 0; query 3: item 3 skipped, 4 hits...
    per_query = []
    for i in range(12):
        ranked = list(range(12))[1:11]
        per_query.append(sum(1 for j in ranked if j != i and y[j] == y[i]) / 10)
    assert got == pytest.approx(sum(per_query) / 12)


def test_retrieval_needs_eleven_vectors():
    with pytest.raises(ValueError, match="at least 11 vectors, got 10"):
        ncl_paper_retrieval(torch.rand(10, 4), torch.zeros(10, dtype=torch.long))
