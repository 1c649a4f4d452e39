"""Benchmark: vectorised/streaming interpretability metrics against per-dimension loops.

Makes sparse non-negative features (about 70% zeros, each dimension mildly selective for one
class), times every metric of ``solo_bayesncl.metrics`` against its loop in
``tests/loop_reference.py`` (the tests' oracle), checks that the values agree, then times the whole set
(one streaming accumulator pass serving every metric) against the sum of the loops.

Vectorised timings are the best of ``--repeat`` runs; each loop runs once, between the first
vectorised run and the others, so that both sides see the same load. The retrieval loop runs
``--loop-queries`` queries (a seeded random subset, full gallery) and its time is scaled by
``n / loop-queries``; its values are compared with the vectorised function on the same queries.
The whole set's values are checked against the loops' results of the rows above (and the
vectorised retrieval over all queries). Each row and the whole set print a verdict against the
targets (each metric >= 3x its loop, the whole set >= 10x the sum of the loops); on a machine
whose load exceeds its cores, compare with ``--threads 1`` as well (docs/evaluation.md).

    python microbenchmarks/bench_metrics.py --n 10000 --k 2048 --classes 100 --device cpu
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

from solo_bayesncl import metrics

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import loop_reference as loops  # noqa: E402  (the tests' oracle, beside them)

TARGET_PER_METRIC = 3.0
TARGET_WHOLE_SET = 10.0


def make_features(
    n: int, k: int, classes: int, zero_share: float, device: str, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Non-negative float32 features: dim j fires more often for class j % C."""
    gen = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, classes, (n,), generator=gen)
    preferred = torch.arange(k) % classes
    boost = 0.5
    base = max(0.0, (1 - zero_share) - boost / classes)
    prob = base + boost * (labels[:, None] == preferred[None, :]).float()
    active = torch.rand(n, k, generator=gen) < prob
    features = torch.rand(n, k, generator=gen) * active
    return features.to(device), labels.to(device)


def timed(fn: Callable[[], object], device: str, repeat: int = 1) -> tuple[float, object]:
    """Best wall time over ``repeat`` runs and the last result."""
    best, result = math.inf, None
    for _ in range(repeat):
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        start = time.perf_counter()
        result = fn()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return best, result


def paired(
    vectorised: Callable[[], object], loop: Callable[[], object], device: str, repeat: int
) -> tuple[float, object, float, object]:
    """Time both in one interleaved sequence (one vectorised run, the loop, then the other
    vectorised runs), so that a change of load hits both sides alike. Returns ``(vectorised best
    time, its result, loop time, its result)``."""
    t_vec, v_vec = timed(vectorised, device)
    t_loop, v_loop = timed(loop, device)
    if repeat > 1:
        t_more, v_vec = timed(vectorised, device, repeat - 1)
        t_vec = min(t_vec, t_more)
    return t_vec, v_vec, t_loop, v_loop


def load_average() -> str:
    """The 1-, 5- and 15-minute load averages and the logical CPUs (timings on a machine whose
    load exceeds its CPUs are inflated, multi-threaded vectorised code most)."""
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} logical CPUs"


def summarize_stats(stats: metrics.DimensionStats) -> dict[str, float]:
    """Scalars that pin down the per-dimension statistics (for the agreement check)."""
    return {
        "purity": float(stats.purity.sum()),
        "active": float(stats.active_count.sum()),
        "majority": float(stats.majority_class.sum()),
        "activation": float(stats.activation_sum.sum()),
    }


def summarize_loop_stats(stats: dict[str, list]) -> dict[str, float]:
    return {
        "purity": sum(stats["purity"]),
        "active": float(sum(stats["active_count"])),
        "majority": float(sum(stats["majority_class"])),
        "activation": sum(stats["activation_sum"]),
    }


def max_deviation(vectorised: dict[str, float], loop: dict[str, float]) -> float:
    return max(abs(vectorised[key] - value) for key, value in loop.items())


def close(vectorised: dict[str, float], loop: dict[str, float], tol: float) -> bool:
    return all(
        abs(vectorised[key] - value) <= tol * max(1.0, abs(value)) for key, value in loop.items()
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=10000, help="samples")
    parser.add_argument("--k", type=int, default=2048, help="feature dimensions")
    parser.add_argument("--classes", type=int, default=100, help="classes")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--repeat", type=int, default=3, help="runs per vectorised timing")
    parser.add_argument("--zero-share", type=float, default=0.7, help="share of zero entries")
    parser.add_argument("--permutations", type=int, default=5, help="label shuffles")
    parser.add_argument("--batch-size", type=int, default=1024, help="accumulator batch size")
    parser.add_argument(
        "--loop-queries", type=int, default=500, help="queries timed in the retrieval loop"
    )
    parser.add_argument("--tol", type=float, default=1e-6, help="relative agreement tolerance")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error("--device cuda requested but torch.cuda.is_available() is False")

    dev = args.device
    features, labels = make_features(args.n, args.k, args.classes, args.zero_share, dev, args.seed)
    c, perms = args.classes, args.permutations
    queries = torch.randperm(args.n, generator=torch.Generator().manual_seed(args.seed + 1))
    queries = queries[: min(args.loop_queries, args.n)].sort().values
    scale = args.n / queries.numel()
    print(
        f"n={args.n} k={args.k} classes={c} device={dev} torch={torch.__version__} "
        f"threads={torch.get_num_threads()} zeros={float((features == 0).float().mean()):.3f} "
        f"repeat={args.repeat}"
    )
    print(f"at start: {load_average()}")
    print(
        f"targets: each metric >= {TARGET_PER_METRIC:g}x its loop, the whole set >= "
        f"{TARGET_WHOLE_SET:g}x the sum of the loops, values within rel tol {args.tol:g}"
    )

    def entropy_keys(h: dict[str, float]) -> dict[str, float]:
        return {f"semantic_entropy_{name}": value for name, value in h.items()}

    cases: list[tuple[str, Callable[[], dict], Callable[[], dict]]] = [
        (
            "active_dims+sparsity",
            lambda: {
                "active_dims": metrics.active_dims(features),
                "sparsity": metrics.sparsity(features),
            },
            lambda: {
                "active_dims": loops.active_dims_loop(features),
                "sparsity": loops.sparsity_loop(features),
            },
        ),
        (
            "semantic_consistency",
            lambda: {"v": metrics.semantic_consistency(features, labels, c)},
            lambda: {"v": loops.semantic_consistency_loop(features, labels, c)},
        ),
        (
            "semantic_entropy (3)",
            lambda: entropy_keys(metrics.semantic_entropy(features, labels, c)),
            lambda: entropy_keys(loops.semantic_entropy_loop(features, labels, c)),
        ),
        (
            f"shuffled baseline x{perms}",
            lambda: {
                "v": metrics.shuffled_semantic_consistency(features, labels, c, permutations=perms)
            },
            lambda: {
                "v": loops.shuffled_semantic_consistency_loop(
                    features, labels, c, permutations=perms
                )
            },
        ),
        (
            "effective_rank",
            lambda: dict(zip(("rank", "entropy"), metrics.effective_rank(features), strict=True)),
            lambda: dict(
                zip(("rank", "entropy"), loops.effective_rank_loop(features), strict=True)
            ),
        ),
        (
            "orthogonality_error",
            lambda: {"v": metrics.orthogonality_error(features)},
            lambda: {"v": loops.orthogonality_error_loop(features)},
        ),
        (
            "per_dimension_stats",
            lambda: summarize_stats(metrics.per_dimension_stats(features, labels, c)),
            lambda: summarize_loop_stats(loops.per_dimension_stats_loop(features, labels, c)),
        ),
    ]

    names = [name for name, _, _ in cases]
    header = (
        f"{'metric':<26}{'loop s':>10}{'vectorised s':>14}{'ratio':>9}  {'max |diff|':>10}  agree"
        f"  verdict (>= {TARGET_PER_METRIC:g}x)"
    )
    print(header)
    print("-" * len(header), flush=True)

    def verdict(ratio: float, target: float) -> str:
        return "met" if ratio >= target else "NOT met"

    def report(
        name: str, t_loop: float, t_vec: float, dev_max: float, ok: bool, target: float, note=""
    ) -> None:
        ratio = t_loop / t_vec
        print(
            f"{name:<26}{t_loop:>10.3f}{t_vec:>14.3f}{ratio:>8.1f}x  {dev_max:>10.2e}  "
            f"{'yes' if ok else 'NO ':<5}  {verdict(ratio, target)}  {note}".rstrip(),
            flush=True,
        )

    loop_total = 0.0
    all_ok = True
    missed: list[str] = []
    loop_values: dict[str, dict] = {}
    for name, vectorised_fn, loop_fn in cases:
        t_vec, v_vec, t_loop, v_loop = paired(vectorised_fn, loop_fn, dev, args.repeat)
        ok = close(v_vec, v_loop, args.tol)
        all_ok &= ok
        if t_loop / t_vec < TARGET_PER_METRIC:
            missed.append(name)
        loop_total += t_loop
        loop_values[name] = v_loop
        report(name, t_loop, t_vec, max_deviation(v_vec, v_loop), ok, TARGET_PER_METRIC)

    # retrieval: the loop on a subset of queries, scaled to all n queries
    name = "retrieval P@1/5/10 x m"
    t_vec, full_retrieval, t_loop, v_loop = paired(
        lambda: metrics.retrieval_precision(features, labels),
        lambda: loops.retrieval_precision_loop(features, labels, query_indices=queries.tolist()),
        dev,
        args.repeat,
    )
    v_sub = metrics.retrieval_precision(features, labels, query_indices=queries.to(dev))
    ok = close(v_sub, v_loop, args.tol)
    all_ok &= ok
    t_loop *= scale
    if t_loop / t_vec < TARGET_PER_METRIC:
        missed.append(name)
    loop_total += t_loop
    note = f"loop: {queries.numel()} queries, time x{scale:.0f}" if scale != 1 else ""
    report(name, t_loop, t_vec, max_deviation(v_sub, v_loop), ok, TARGET_PER_METRIC, note)

    # the whole set: one accumulator pass over batches serves every metric
    def whole_set() -> dict[str, float]:
        acc = metrics.InterpretabilityAccumulator(
            c, shuffle_permutations=perms, retrieval_device=None
        )
        for start in range(0, args.n, args.batch_size):
            stop = start + args.batch_size
            acc.update(features[start:stop], labels[start:stop])
        return acc.compute()

    t_whole, whole = timed(whole_set, dev, args.repeat)
    first, entropy, rank = (loop_values[name] for name in (names[0], names[2], names[4]))
    expected = {
        "active_dims": float(first["active_dims"]),
        "sparsity": first["sparsity"],
        "semantic_consistency": loop_values[names[1]]["v"],
        "semantic_consistency_shuffled": loop_values[names[3]]["v"],
        **entropy,
        "effective_rank": rank["rank"],
        "effective_rank_entropy": rank["entropy"],
        "orthogonality_error": loop_values[names[5]]["v"],
        **full_retrieval,
    }
    whole_ok = close(whole, expected, args.tol)
    all_ok &= whole_ok
    whole_ratio = loop_total / t_whole
    print("-" * len(header))
    report(
        "whole set (accumulator)",
        loop_total,
        t_whole,
        max_deviation(whole, expected),
        whole_ok,
        TARGET_WHOLE_SET,
        f"(target >= {TARGET_WHOLE_SET:g}x; loop = sum of the loops above)",
    )
    print()
    print(f"device {dev}, {torch.get_num_threads()} torch threads, {load_average()} at end")
    print(
        f"verdict each metric >= {TARGET_PER_METRIC:g}x: "
        + ("met" if not missed else f"NOT met ({', '.join(missed)})")
    )
    print(f"verdict whole set >= {TARGET_WHOLE_SET:g}x: {verdict(whole_ratio, TARGET_WHOLE_SET)}")
    print(f"verdict values agree (rel tol {args.tol:g}): {'yes' if all_ok else 'NO'}")
    print("whole-set metrics:")
    for key, value in whole.items():
        print(f"  {key:<36}{value:.6f}")


if __name__ == "__main__":
    main()
