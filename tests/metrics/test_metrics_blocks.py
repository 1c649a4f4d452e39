"""Blocks of rows, reused workspaces, bit-packed masks and the running Gram of the metrics: each
rewritten path against the loop reference or an independent computation."""

from __future__ import annotations

import math

import loop_reference
import numpy as np
import pytest
import torch

import solo_bayesncl.metrics as metrics
from solo_bayesncl.metrics import _bitmask, _blocks, baseline, spectral
from solo_bayesncl.metrics.semantics import batch_class_sums

NUM_CLASSES = 5


def awkward_features(n: int = 300, k: int = 37, dtype=torch.float64):
    """Sparse non-negative features with dims never active, a class without samples, rows that
    tie (duplicates and zero rows) and entries at the threshold."""
    gen = torch.Generator().manual_seed(21)
    features = torch.rand(n, k, generator=gen, dtype=torch.float64)
    features[torch.rand(n, k, generator=gen) < 0.75] = 0
    labels = torch.randint(0, NUM_CLASSES - 1, (n,), generator=gen)  # class 4 has no sample
    for c in range(NUM_CLASSES - 1):
        features[labels == c, c] += 1.0
    features[:, [20, 25]] = 0  # never active
    features[:, 30] = 1e-7  # at most eps everywhere, raw and row-normalised
    features[10] = 0  # a zero row
    features[11:14] = features[40]  # tied rows (retrieval ties, broken by lower index)
    return features.to(dtype), labels


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks of 64 rows for 37 float64 columns (an uneven last block for 300 rows)."""
    monkeypatch.setattr(_blocks, "BLOCK_BYTES", 64 * 37 * 8)
    assert _blocks.block_rows(37, 8) == 64


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_one_shot_functions_over_many_blocks_equal_the_loops(small_blocks, dtype) -> None:
    features, labels = awkward_features(dtype=dtype)
    ref = loop_reference
    assert metrics.active_dims(features) == ref.active_dims_loop(features) == 34
    assert metrics.sparsity(features) == pytest.approx(ref.sparsity_loop(features), abs=1e-12)
    assert metrics.semantic_consistency(features, labels, NUM_CLASSES) == pytest.approx(
        ref.semantic_consistency_loop(features, labels, NUM_CLASSES), abs=1e-9
    )
    entropy = metrics.semantic_entropy(features, labels, NUM_CLASSES)
    assert entropy == pytest.approx(
        ref.semantic_entropy_loop(features, labels, NUM_CLASSES), abs=1e-6
    )
    assert metrics.shuffled_semantic_consistency(
        features, labels, NUM_CLASSES, permutations=3, seed=4
    ) == pytest.approx(
        ref.shuffled_semantic_consistency_loop(
            features, labels, NUM_CLASSES, permutations=3, seed=4
        ),
        abs=1e-9,
    )
    rank, rank_loop = metrics.effective_rank(features), ref.effective_rank_loop(features)
    assert rank.rank == pytest.approx(rank_loop[0], rel=1e-6)
    assert metrics.orthogonality_error(features) == pytest.approx(
        ref.orthogonality_error_loop(features), abs=1e-7
    )
    stats = metrics.per_dimension_stats(features, labels, NUM_CLASSES)
    loop = ref.per_dimension_stats_loop(features, labels, NUM_CLASSES)
    assert stats.class_histogram.tolist() == loop["class_histogram"]
    assert stats.majority_class.tolist() == loop["majority_class"]
    assert stats.majority_class[[20, 25, 30]].tolist() == [-1, -1, -1]
    assert stats.class_histogram[:, NUM_CLASSES - 1].sum() == 0
    assert stats.purity.tolist() == pytest.approx(loop["purity"], abs=1e-12)
    assert stats.activation_sum.tolist() == pytest.approx(loop["activation_sum"], rel=1e-6)
    per_sample = metrics.active_dims_per_sample(features)
    assert per_sample.tolist() == (features.abs() > metrics.EPS).sum(dim=1).tolist()


def test_streaming_over_blocks_equals_the_loops(small_blocks) -> None:
    features, labels = awkward_features()
    streamed = metrics.compute_interpretability_metrics(
        features, labels, NUM_CLASSES, batch_size=50, chunk_size=23
    )
    loops = loop_reference.all_metrics_loop(features, labels, NUM_CLASSES)
    assert set(loops) <= set(streamed)
    for key, expected in loops.items():
        # the Gram route drops singular values below sqrt(k * 2.2e-16) s_max (column 30)
        tol = {"rel": 1e-6} if key.startswith("effective_rank") else {"abs": 1e-9}
        assert streamed[key] == pytest.approx(expected, **tol), key


def test_batch_sums_with_a_workspace_equal_fresh_temporaries() -> None:
    features, labels = awkward_features(dtype=torch.float32)
    workspace = _blocks.Workspace()
    for start in (0, 100, 250):  # the last block is shorter: a view of the same buffers
        block, rows = features[start : start + 100], labels[start : start + 100]
        fresh = batch_class_sums(block, rows, NUM_CLASSES, metrics.EPS, True, True, True)
        reused = batch_class_sums(
            block, rows, NUM_CLASSES, metrics.EPS, True, True, True, workspace
        )
        for a, b in zip(fresh, reused, strict=True):
            if isinstance(a, tuple):
                assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
            else:
                assert torch.equal(a, b)
        assert reused.active.data_ptr() == workspace.take("active", block).data_ptr()
    normalized = metrics.row_normalize(features).abs()
    assert torch.equal(fresh.active, (normalized[250:] > metrics.EPS).to(torch.float32))
    assert torch.equal(reused.raw_abs_sum, features[250:].abs().sum(dim=0))
    raw = (features[250:].abs() > metrics.EPS).sum(dim=0).to(torch.float32)
    assert torch.equal(reused.raw_active, raw)
    assert float(reused.peak) == float(features[250:].abs().max())


def test_workspace_reuses_a_buffer_while_it_is_big_enough() -> None:
    workspace = _blocks.Workspace()
    first = workspace.take("a", torch.zeros(8, 3))
    assert workspace.take("a", torch.zeros(5, 3)).data_ptr() == first.data_ptr()
    assert workspace.take("a", torch.zeros(5, 3)).shape == (5, 3)
    assert workspace.take("a", torch.zeros(9, 3)).data_ptr() != first.data_ptr()
    assert workspace.take("a", torch.zeros(2, 3), torch.float64).dtype == torch.float64
    assert workspace.take("a", torch.zeros(2, 4)).shape == (2, 4)


@pytest.mark.parametrize("num_dims", [1, 8, 13, 64])
def test_bit_packing_matches_numpy_on_every_path(num_dims: int) -> None:
    gen = torch.Generator().manual_seed(num_dims)
    mask = torch.rand(17, num_dims, generator=gen) > 0.6
    expected = np.packbits(mask.numpy(), axis=1)
    for source in (mask, mask.to(torch.float32), mask.to(torch.float64)):
        assert np.array_equal(_bitmask.pack_tensor(source).numpy(), expected)
        assert np.array_equal(_bitmask.pack_mask(source).numpy(), expected)
    packed = torch.from_numpy(expected)
    for unpacked in (
        _bitmask.unpack_tensor(packed, num_dims, torch.float32),
        _bitmask.unpack_mask(packed, num_dims, torch.float32),
    ):
        assert unpacked.dtype == torch.float32
        assert torch.equal(unpacked, mask.to(torch.float32))


def test_shuffled_counts_flushed_early_are_the_same(monkeypatch) -> None:
    features, labels = awkward_features()
    masks = list(m.clone() for m in metrics.semantics.activity_masks(features))
    expected = baseline._shuffled_class_counts(masks, labels, NUM_CLASSES, 4, 2)
    monkeypatch.setattr(baseline, "EXACT_FLOAT32_ROWS", 7)
    chunks = [m for block in masks for m in block.split(5)]
    assert torch.equal(baseline._shuffled_class_counts(chunks, labels, NUM_CLASSES, 4, 2), expected)
    assert expected.sum(dim=(1, 2)).tolist() == [float(masks[0].sum())] * 4


def test_consistencies_of_stacked_counts_equal_one_at_a_time() -> None:
    gen = torch.Generator().manual_seed(5)
    counts = torch.randint(0, 4, (3, 6, 9), generator=gen).double()
    counts[1] = 0  # no active dimension: 0.0
    counts[2, :, 4] = 0  # one dimension never active
    values = baseline.consistencies_from_counts(counts)
    expected = [metrics.semantics.consistency_from_counts(c) for c in counts]
    assert values.tolist() == pytest.approx(expected, abs=1e-15)
    assert values[1] == 0.0


def test_running_gram_of_float32_blocks_is_exact() -> None:
    gen = torch.Generator().manual_seed(6)
    features = torch.rand(50, 7, generator=gen) * 3
    running = spectral.RunningGram(7)
    for block in features.split(16):
        running.add(block)
    exact = features.double().T @ features.double()  # products of float32 are exact in float64
    assert torch.allclose(running.gram, exact, rtol=1e-15, atol=0)


def test_running_gram_rescales_when_float64_blocks_arrive() -> None:
    gen = torch.Generator().manual_seed(7)
    features = torch.rand(40, 6, generator=gen, dtype=torch.float64)
    running = spectral.RunningGram(6)
    running.add(features[:20].float())  # float32 first, added unscaled
    running.add(features[20:30] * 1e160)  # squares overflow float64 without the rescaling
    running.add(features[30:] * 1e-160)
    assert bool(torch.isfinite(running.gram).all())
    scaled = torch.cat([features[:20].float().double() / 1e160, features[20:30]])
    expected = scaled.T @ scaled  # the Gram up to the factor 1e320
    assert torch.allclose(running.gram / running.gram.max(), expected / expected.max(), rtol=1e-12)


def test_effective_rank_and_orthogonality_of_huge_float64_features() -> None:
    features, _ = awkward_features()
    features[:, 30] = 0  # 1e-7 would turn active (eps is absolute)
    huge = features * 1e200
    assert math.isfinite(metrics.effective_rank(huge).rank)
    assert metrics.effective_rank(huge).rank == pytest.approx(
        metrics.effective_rank(features).rank, rel=1e-9
    )
    assert metrics.orthogonality_error(huge) == pytest.approx(
        metrics.orthogonality_error(features), rel=1e-9
    )


def test_top_images_are_the_same_over_blocks(monkeypatch) -> None:
    features, _ = awkward_features()
    whole = metrics.top_images(features, 4)
    monkeypatch.setattr(_blocks, "BLOCK_BYTES", 16 * 37 * 8)
    blocked = metrics.top_images(features, 4, block=3)
    assert torch.equal(whole.index, blocked.index)
    assert torch.equal(whole.value, blocked.value)


def test_signed_features_take_the_abs_path(small_blocks) -> None:
    features, labels = awkward_features()
    features[:, 20] = -1.0  # active through negative entries only
    features[5, 25] = -1e-6  # at most eps in magnitude: inactive
    ref = loop_reference
    assert metrics.active_dims(features) == ref.active_dims_loop(features) == 35
    assert metrics.sparsity(features) == pytest.approx(ref.sparsity_loop(features), abs=1e-12)
    assert metrics.semantic_consistency(features, labels, NUM_CLASSES) == pytest.approx(
        ref.semantic_consistency_loop(features, labels, NUM_CLASSES), abs=1e-12
    )
    assert metrics.active_dims(features.abs()) == 35
