"""Streaming, loop-reference and device equivalence of the interpretability metrics."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import loop_reference
import pytest
import torch

import solo_bayesncl.metrics as metrics
from solo_bayesncl.metrics import InterpretabilityAccumulator, compute_interpretability_metrics

NUM_CLASSES = 6


def sparse_features(seed: int, n: int = 150, k: int = 70, zero_share: float = 0.7):
    """Non-negative float64 features with ~zero_share zeros, a zero row and a zero column."""
    gen = torch.Generator().manual_seed(seed)
    features = torch.rand(n, k, generator=gen, dtype=torch.float64)
    features[torch.rand(n, k, generator=gen) < zero_share] = 0
    features[7] = 0
    features[:, 11] = 0
    labels = torch.randint(0, NUM_CLASSES, (n,), generator=gen)
    # make a few dimensions class-selective so consistency is not only chance
    for c in range(NUM_CLASSES):
        features[labels == c, c] += 1.0
    return features, labels


def stream(features, labels, batch_sizes, **options) -> InterpretabilityAccumulator:
    acc = InterpretabilityAccumulator(NUM_CLASSES, **options)
    start = 0
    for size in batch_sizes:
        acc.update(features[start : start + size], labels[start : start + size])
        start += size
    assert start == features.shape[0]
    return acc


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_vectorised_equals_loop_reference(seed: int) -> None:
    features, labels = sparse_features(seed)
    vectorised = compute_interpretability_metrics(features, labels, NUM_CLASSES, batch_size=40)
    loops = loop_reference.all_metrics_loop(features, labels, NUM_CLASSES)
    assert set(loops) <= set(vectorised)
    for key, expected in loops.items():
        assert vectorised[key] == pytest.approx(expected, abs=1e-6), key


def test_standalone_functions_equal_loop_reference() -> None:
    features, labels = sparse_features(4)
    ref = loop_reference
    assert metrics.active_dims(features) == ref.active_dims_loop(features)
    assert metrics.sparsity(features) == pytest.approx(ref.sparsity_loop(features), abs=1e-12)
    assert metrics.semantic_consistency(features, labels, NUM_CLASSES) == pytest.approx(
        ref.semantic_consistency_loop(features, labels, NUM_CLASSES), abs=1e-9
    )
    entropy = metrics.semantic_entropy(features, labels, NUM_CLASSES)
    entropy_loop = ref.semantic_entropy_loop(features, labels, NUM_CLASSES)
    for name in ("freq", "sum", "mean"):
        assert entropy[name] == pytest.approx(entropy_loop[name], abs=1e-9), name
    assert metrics.shuffled_semantic_consistency(
        features, labels, NUM_CLASSES, permutations=3, seed=9
    ) == pytest.approx(
        ref.shuffled_semantic_consistency_loop(
            features, labels, NUM_CLASSES, permutations=3, seed=9
        ),
        abs=1e-9,
    )
    rank = metrics.effective_rank(features)
    rank_loop = ref.effective_rank_loop(features)
    assert rank.rank == pytest.approx(rank_loop[0], abs=1e-6)
    assert rank.entropy == pytest.approx(rank_loop[1], abs=1e-9)
    assert metrics.orthogonality_error(features) == pytest.approx(
        ref.orthogonality_error_loop(features), abs=1e-9
    )
    queries = torch.tensor([0, 7, 33, 149])
    assert metrics.retrieval_precision(
        features, labels, dim_counts=[5, 70], query_indices=queries
    ) == pytest.approx(
        ref.retrieval_precision_loop(features, labels, dim_counts=[5, 70], query_indices=queries)
    )


def test_per_dimension_stats_equal_loop_reference() -> None:
    features, labels = sparse_features(5)
    stats = stream(features, labels, [50, 50, 50]).per_dimension_stats()
    loop = loop_reference.per_dimension_stats_loop(features, labels, NUM_CLASSES)
    assert stats.num_samples == 150
    assert stats.active_count.tolist() == loop["active_count"]
    assert stats.class_histogram.tolist() == loop["class_histogram"]
    assert stats.majority_class.tolist() == loop["majority_class"]
    assert stats.purity.tolist() == pytest.approx(loop["purity"])
    assert stats.activation_sum.tolist() == pytest.approx(loop["activation_sum"])
    assert stats.activation_mean.tolist() == pytest.approx(
        [s / 150 for s in loop["activation_sum"]]
    )
    assert stats.class_histogram.shape == (70, NUM_CLASSES)
    assert stats.class_activation_sum.shape == (70, NUM_CLASSES)
    assert stats.majority_class[11] == -1
    direct = metrics.per_dimension_stats(features, labels, NUM_CLASSES)
    assert torch.equal(direct.class_histogram, stats.class_histogram)


def test_streaming_equals_one_shot() -> None:
    features, labels = sparse_features(6)
    one_shot = stream(features, labels, [150]).compute()
    uneven = stream(features, labels, [1, 13, 64, 2, 70]).compute()
    chunked = stream(features, labels, [150], chunk_size=7).compute()
    assert set(one_shot) == set(uneven) == set(chunked)
    for key, value in one_shot.items():
        assert uneven[key] == pytest.approx(value, abs=1e-12), key
        assert chunked[key] == pytest.approx(value, abs=1e-12), key


def test_retrieval_cap_is_uniform_subset_independent_of_batching() -> None:
    features, labels = sparse_features(7)
    a = stream(features, labels, [150], retrieval_max_samples=40)
    b = stream(features, labels, [10] * 15, retrieval_max_samples=40)
    other_seed = stream(features, labels, [150], retrieval_max_samples=40, seed=1)
    kept = a._buffer.positions
    assert kept.numel() == 40
    assert torch.equal(kept, b._buffer.positions)
    assert torch.all(kept[1:] > kept[:-1])
    assert not torch.equal(kept, other_seed._buffer.positions)
    ma, mb = a.compute(), b.compute()
    assert ma["retrieval_samples"] == 40
    assert ma == pytest.approx(mb, abs=1e-12)
    # the cap affects retrieval only; ranking of dims uses the whole set
    full = stream(features, labels, [150]).compute()
    assert ma["semantic_consistency"] == full["semantic_consistency"]
    subset = features[kept]
    order = torch.sort(features.abs().sum(0), descending=True, stable=True).indices
    expected = metrics.retrieval.retrieval_precision_from_vectors(subset, labels[kept], order)
    for key, value in expected.items():
        assert ma[key] == pytest.approx(value), key
    uncapped = stream(features, labels, [150], retrieval_max_samples=1000).compute()
    assert uncapped["retrieval_samples"] == 150
    assert uncapped["retrieval_p@1"] == full["retrieval_p@1"]


def test_float32_features_agree_with_float64() -> None:
    features, labels = sparse_features(8)
    m64 = compute_interpretability_metrics(features, labels, NUM_CLASSES)
    m32 = compute_interpretability_metrics(features.float(), labels, NUM_CLASSES)
    for key, value in m64.items():
        assert m32[key] == pytest.approx(value, rel=1e-4, abs=1e-5), key


def test_numpy_input_is_accepted() -> None:
    features, labels = sparse_features(9)
    from_numpy = compute_interpretability_metrics(features.numpy(), labels.numpy(), NUM_CLASSES)
    assert from_numpy == pytest.approx(
        compute_interpretability_metrics(features, labels, NUM_CLASSES)
    )


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_equals_cpu() -> None:
    features, labels = sparse_features(10)
    cpu = compute_interpretability_metrics(features, labels, NUM_CLASSES)
    cuda = compute_interpretability_metrics(features.cuda(), labels.cuda(), NUM_CLASSES)
    on_device = compute_interpretability_metrics(
        features.cuda(), labels.cuda(), NUM_CLASSES, retrieval_device=None
    )
    for key, value in cpu.items():
        assert cuda[key] == pytest.approx(value, abs=1e-9), key
        assert on_device[key] == pytest.approx(value, abs=1e-9), key
    assert all(math.isfinite(v) for v in cuda.values())


def test_metrics_package_is_host_independent() -> None:
    package = Path(metrics.__file__).parent
    for path in package.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            for name in names:
                root = name.split(".")[0]
                assert root not in {"solo", "lightning", "pytorch_lightning"}, (path.name, name)


def test_one_shot_functions_cross_row_blocks() -> None:
    """More rows than one internal block (1024): block sums must add up."""
    gen = torch.Generator().manual_seed(11)
    features = torch.rand(2500, 8, generator=gen, dtype=torch.float64)
    features[features < 0.6] = 0
    labels = torch.randint(0, 3, (2500,), generator=gen)
    ref = loop_reference
    assert metrics.sparsity(features) == pytest.approx(ref.sparsity_loop(features), abs=1e-12)
    assert metrics.semantic_consistency(features, labels, 3) == pytest.approx(
        ref.semantic_consistency_loop(features, labels, 3), abs=1e-12
    )
    assert metrics.semantic_entropy(features, labels, 3) == pytest.approx(
        ref.semantic_entropy_loop(features, labels, 3), abs=1e-12
    )
    assert metrics.shuffled_semantic_consistency(features, labels, 3, permutations=2) == (
        pytest.approx(ref.shuffled_semantic_consistency_loop(features, labels, 3, permutations=2))
    )
    assert metrics.effective_rank(features).rank == pytest.approx(
        ref.effective_rank_loop(features)[0], abs=1e-9
    )
