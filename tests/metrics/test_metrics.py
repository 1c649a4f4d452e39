"""Known-answer tests of the interpretability metrics (solo_bayesncl.metrics)."""

from __future__ import annotations

import math

import pytest
import torch

from solo_bayesncl.metrics import (
    METRIC_DESCRIPTIONS,
    InterpretabilityAccumulator,
    active_dims,
    compute_interpretability_metrics,
    effective_rank,
    orthogonality_error,
    per_dimension_stats,
    retrieval_dim_counts,
    retrieval_precision,
    semantic_consistency,
    semantic_entropy,
    shuffled_semantic_consistency,
    sparsity,
)


def entropy(weights: list[float]) -> float:
    total = sum(weights)
    return -sum(w / total * math.log(w / total) for w in weights if w > 0)


def balanced_labels(per_class: int, num_classes: int) -> torch.Tensor:
    return torch.arange(num_classes).repeat_interleave(per_class)


def test_one_hot_features_are_perfectly_consistent() -> None:
    labels = balanced_labels(6, 4)
    features = torch.nn.functional.one_hot(labels, 4).double()
    m = compute_interpretability_metrics(features, labels, 4, shuffle_permutations=3)
    assert m["semantic_consistency"] == pytest.approx(1.0)
    for key in ("semantic_entropy_freq", "semantic_entropy_sum", "semantic_entropy_mean"):
        assert m[key] == pytest.approx(0.0, abs=1e-12)
    assert m["semantic_consistency_shuffled"] < 0.9
    assert m["semantic_consistency_gain"] > 0.1
    assert m["orthogonality_error"] == pytest.approx(0.0, abs=1e-12)
    assert m["effective_rank"] == pytest.approx(4.0)  # four equal singular values sqrt(6)
    assert m["active_dims"] == 4
    assert m["sparsity"] == pytest.approx(0.75)
    assert m["retrieval_p@1"] == pytest.approx(1.0)


def test_dense_features_sit_at_chance_and_the_gain_is_zero() -> None:
    num_classes = 5
    labels = balanced_labels(20, num_classes)
    features = (
        torch.rand(100, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(1)) + 0.1
    )
    m = compute_interpretability_metrics(features, labels, num_classes)
    assert m["semantic_consistency"] == pytest.approx(1 / num_classes)
    assert m["semantic_consistency_shuffled"] == pytest.approx(1 / num_classes)
    assert m["semantic_consistency_gain"] == pytest.approx(0.0, abs=1e-12)
    assert m["semantic_entropy_freq"] == pytest.approx(math.log(num_classes))
    assert m["sparsity"] == 0.0
    assert shuffled_semantic_consistency(features, labels, num_classes) == pytest.approx(0.2)


def test_sparse_random_features_have_a_raised_floor_that_the_baseline_removes() -> None:
    gen = torch.Generator().manual_seed(3)
    labels = torch.randint(0, 10, (400,), generator=gen)
    features = torch.rand(400, 64, generator=gen, dtype=torch.float64)
    features[features < 0.97] = 0  # ~12 active samples per dim, unrelated to the labels
    m = compute_interpretability_metrics(features, labels, 10, shuffle_permutations=8)
    assert m["semantic_consistency"] > 0.2  # well above chance (0.1) by luck alone
    assert m["semantic_consistency_shuffled"] > 0.2
    assert abs(m["semantic_consistency_gain"]) < 0.04


def test_semantic_entropy_variants_by_hand() -> None:
    rows = [[0.6, 0.8]] * 3 + [[0.0, 1.0]] + [[1.0, 0.0], [0.0, 1.0]]
    features = torch.tensor(rows, dtype=torch.float64)
    labels = torch.tensor([0, 0, 0, 0, 1, 1])
    # dim 0: active 3 x class 0 (0.6 each), 1 x class 1 (1.0); class sizes 4 and 2
    # dim 1: active 4 x class 0 (0.8 x 3 + 1.0), 1 x class 1 (1.0)
    expected_freq = (entropy([3, 1]) + entropy([4, 1])) / 2
    expected_sum = (entropy([1.8, 1.0]) + entropy([3.4, 1.0])) / 2
    expected_mean = (entropy([1.8 / 4, 1.0 / 2]) + entropy([3.4 / 4, 1.0 / 2])) / 2
    h = semantic_entropy(features, labels, 2)
    assert h["freq"] == pytest.approx(expected_freq)
    assert h["sum"] == pytest.approx(expected_sum)
    assert h["mean"] == pytest.approx(expected_mean)
    assert semantic_consistency(features, labels, 2) == pytest.approx((3 / 4 + 4 / 5) / 2)


def test_rows_are_normalised_before_thresholding() -> None:
    # 1e-4 is active in absolute terms but 1e-4 / 1e3 = 1e-7 <= eps after normalisation.
    features = torch.tensor([[1e3, 1e-4], [0.0, 1.0]], dtype=torch.float64)
    labels = torch.tensor([0, 1])
    assert active_dims(features) == 2
    assert sparsity(features) == pytest.approx(0.25)
    stats = per_dimension_stats(features, labels, 2)
    assert stats.active_count.tolist() == [1, 1]
    assert semantic_consistency(features, labels, 2) == pytest.approx(1.0)


def test_orthogonality_error_of_duplicated_columns() -> None:
    a = torch.tensor([1.0, 2.0, 0.0, 0.0], dtype=torch.float64)
    b = torch.tensor([0.0, 0.0, 3.0, 1.0], dtype=torch.float64)
    features = torch.stack([a, a * 2, b], dim=1)  # cos(a, 2a) = 1, cos(a, b) = 0
    assert orthogonality_error(features) == pytest.approx(2 / 6)
    two = torch.tensor([[1.0, 1.0], [0.0, 1.0]], dtype=torch.float64)  # cos = 1/sqrt(2)
    assert orthogonality_error(two) == pytest.approx(1 / math.sqrt(2))
    with_zero_column = torch.cat([two, torch.zeros(2, 1, dtype=torch.float64)], dim=1)
    assert orthogonality_error(with_zero_column) == pytest.approx(1 / math.sqrt(2))


def test_effective_rank_of_rank_one_and_identity_like_matrices() -> None:
    gen = torch.Generator().manual_seed(0)
    u = torch.rand(50, 1, generator=gen, dtype=torch.float64)
    v = torch.rand(1, 30, generator=gen, dtype=torch.float64)
    rank_one = effective_rank(u @ v)
    assert rank_one.rank == pytest.approx(1.0, abs=1e-9)
    assert rank_one.entropy == pytest.approx(0.0, abs=1e-9)
    rank_one_f32 = effective_rank((u @ v).float())
    assert rank_one_f32.rank == pytest.approx(1.0, abs=1e-4)
    identity_like = torch.cat([torch.eye(12), 3 * torch.eye(12)]).double()
    full = effective_rank(identity_like)
    assert full.rank == pytest.approx(12.0)
    assert full.entropy == pytest.approx(math.log(12))
    diagonal = torch.diag(torch.tensor([3.0, 1.0], dtype=torch.float64))
    assert effective_rank(diagonal).entropy == pytest.approx(entropy([3.0, 1.0]))


def test_zero_row_and_zero_column_give_no_nan() -> None:
    gen = torch.Generator().manual_seed(2)
    features = torch.relu(torch.randn(40, 12, generator=gen, dtype=torch.float64))
    features[5] = 0
    features[:, 3] = 0
    labels = torch.randint(0, 3, (40,), generator=gen)
    m = compute_interpretability_metrics(features, labels, 3, retrieval_dim_counts=[4, 12])
    assert all(math.isfinite(v) for v in m.values()), m
    assert m["active_dims"] == 11
    stats = per_dimension_stats(features, labels, 3)
    assert stats.majority_class[3] == -1
    assert stats.purity[3] == 0.0
    assert stats.active_count[3] == 0


def test_all_zero_features_are_finite() -> None:
    m = compute_interpretability_metrics(torch.zeros(10, 4), torch.arange(10) % 2, 2)
    assert all(math.isfinite(v) for v in m.values()), m
    assert m["active_dims"] == 0
    assert m["sparsity"] == 1.0
    assert m["semantic_consistency"] == 0.0
    assert m["effective_rank"] == 0.0
    assert m["orthogonality_error"] == 0.0


def test_retrieval_hand_checked_example() -> None:
    features = torch.tensor(
        [[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9], [1.0, 1.0]], dtype=torch.float64
    )
    labels = torch.tensor([0, 0, 1, 0, 1])
    # neighbours by cosine: 0 -> 1, 4 | 1 -> 0, 4 | 2 -> 3, 4 | 3 -> 2, 4 | 4 -> 1 = 3 (tie), 0 = 2
    result = retrieval_precision(features, labels, ks=(1, 2))
    assert result["retrieval_p@1"] == pytest.approx((1 + 1 + 0 + 0 + 0) / 5)
    assert result["retrieval_p@2"] == pytest.approx((0.5 + 0.5 + 0.5 + 0 + 0) / 5)


def test_retrieval_ties_break_by_lower_index_and_top_m_dims() -> None:
    identical = torch.ones(4, 3, dtype=torch.float64)
    labels = torch.tensor([0, 1, 0, 1])
    result = retrieval_precision(identical, labels, ks=(1, 2))
    assert result["retrieval_p@1"] == pytest.approx(0.25)  # only query 2 -> 0 hits
    assert result["retrieval_p@2"] == pytest.approx(1.5 / 4)
    # dim 0 has the larger summed activation; on it alone all rows tie
    features = torch.tensor([[2.0, 0.0], [2.0, 0.5], [2.0, 0.0]], dtype=torch.float64)
    labels = torch.tensor([0, 1, 0])
    result = retrieval_precision(features, labels, ks=(1,), dim_counts=[1, 2])
    assert result["retrieval_p@1_m1"] == pytest.approx(1 / 3)
    assert result["retrieval_p@1"] == pytest.approx(2 / 3)
    zero_rows = torch.zeros(3, 2, dtype=torch.float64)
    # all cosines are 0: query 0 -> 1 (hit), 1 -> 0 (hit), 2 -> 0 (miss)
    assert retrieval_precision(zero_rows, torch.tensor([1, 1, 0]), ks=(1,))["retrieval_p@1"] == (
        pytest.approx(2 / 3)
    )


def test_retrieval_dim_counts_double_and_end_at_k() -> None:
    assert retrieval_dim_counts(2048) == [32, 64, 128, 256, 512, 1024, 2048]
    assert retrieval_dim_counts(100) == [32, 64, 100]
    assert retrieval_dim_counts(64) == [32, 64]
    assert retrieval_dim_counts(10) == [10]


def test_metric_keys_are_documented() -> None:
    gen = torch.Generator().manual_seed(0)
    m = compute_interpretability_metrics(
        torch.rand(30, 70, generator=gen), torch.randint(0, 3, (30,), generator=gen), 3
    )
    patterns = {key for key in METRIC_DESCRIPTIONS if "{" not in key}
    assert patterns <= set(m)
    retrieval = {key for key in m if key.startswith("retrieval_p@")}
    assert retrieval == {f"retrieval_p@{k}{s}" for k in (1, 5, 10) for s in ("_m32", "_m64", "")}
    assert set(m) - patterns == retrieval


def test_optional_parts_can_be_switched_off() -> None:
    acc = InterpretabilityAccumulator(3, shuffle_permutations=1, track_gram=False, retrieval=False)
    acc.update(torch.rand(8, 5), torch.arange(8) % 3)
    m = acc.compute()
    assert "effective_rank" not in m
    assert not any(key.startswith("retrieval") for key in m)
    assert "semantic_consistency" in m


@pytest.mark.parametrize(
    ("features", "labels", "message"),
    [
        (torch.rand(4, 3), torch.tensor([0, 1, 2, 3]), "labels must lie in 0..2"),
        (torch.rand(4, 3), torch.tensor([0, 1, 2]), "labels has 3 entries but features has 4"),
        (torch.rand(4), torch.tensor([0, 1, 2, 0]), "features must be a 2-D tensor"),
        (torch.rand(2, 3), torch.tensor([0.0, 1.0]), "labels must be an integer tensor"),
        (torch.tensor([[float("nan"), 1.0]]), torch.tensor([0]), "NaN or Inf"),
    ],
)
def test_bad_input_is_named(features, labels, message) -> None:
    with pytest.raises(ValueError, match=message):
        compute_interpretability_metrics(features, labels, 3)


def test_accumulator_errors() -> None:
    acc = InterpretabilityAccumulator(2)
    with pytest.raises(ValueError, match="call update"):
        acc.compute()
    acc.update(torch.rand(3, 4), torch.tensor([0, 1, 0]))
    with pytest.raises(ValueError, match="features has 5 dims but earlier batches had 4"):
        acc.update(torch.rand(3, 5), torch.tensor([0, 1, 0]))
    with pytest.raises(ValueError, match="num_classes must be an int >= 1"):
        InterpretabilityAccumulator(0)
    with pytest.raises(
        ValueError, match=r"^retrieval_max_samples=1 is out of range; allowed: an integer >= 2$"
    ):
        InterpretabilityAccumulator(2, retrieval_max_samples=1)


def test_the_shuffled_baseline_has_one_rule() -> None:
    """At least one permutation, as the training callback and the report require: the
    consistency gain is measured against it."""
    with pytest.raises(ValueError, match=r"^shuffle_permutations=0 is out of range; allowed: an "):
        InterpretabilityAccumulator(3, shuffle_permutations=0)
