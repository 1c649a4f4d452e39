"""Times the InfoNCE loss of solo-bayesncl against solo-learn's SimCLR loss, and the gated path.

Forward + backward on the same random features, repeated after a warm-up; the median is reported
with the ratio to solo-learn's ``simclr_loss_func`` measured in the same run. InfoNCE runs as the
training steps call it (``check_inputs=False``: no input check, which reads the device). Also
prints the largest difference between the two loss values (they compute the same formula).

Usage::

    python microbenchmarks/bench_loss.py [--repeats 10] [--warmup 3] [--threads N]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from solo_bayesncl.core.gates import BernoulliGate, bernoulli_kl
from solo_bayesncl.core.losses import gated_representation, info_nce_loss

CASES = ((256, 256), (512, 2048))  # (images per batch, feature dimension k); 2 views each
TEMPERATURE = 0.2


def median_seconds(
    steps: dict[str, Callable[[], None]], repeats: int, warmup: int
) -> dict[str, float]:
    """Median wall time of every step over ``repeats`` rounds after ``warmup`` untimed ones.

    The steps run in turn within each round, so load from other processes affects them alike.
    """
    for _ in range(warmup):
        for step in steps.values():
            step()
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(repeats):
        for name, step in steps.items():
            start = time.perf_counter()
            step()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def _load_solo_loss() -> Callable | None:
    try:
        from solo.losses.simclr import simclr_loss_func
    except ImportError as error:
        print(f"solo-learn not importable ({error}); timing solo-bayesncl only")
        return None
    return simclr_loss_func


def make_steps(n_images: int, k: int, solo_loss: Callable | None) -> dict[str, Callable[[], None]]:
    """Forward + backward closures on the same features ``(2 * n_images, k)``."""
    g = torch.Generator().manual_seed(0)
    z = torch.randn(2 * n_images, k, generator=g).requires_grad_(True)
    logits = torch.randn(2 * n_images, k, generator=g).requires_grad_(True)
    indexes = torch.arange(n_images).repeat(2)
    gate = BernoulliGate("ste", threshold=0.5, temperature=1.0)

    def solo() -> None:
        z.grad = None
        solo_loss(z, indexes, TEMPERATURE).backward()

    def ours() -> None:
        z.grad = None
        info_nce_loss(F.normalize(z, dim=-1), indexes, TEMPERATURE, check_inputs=False).backward()

    def gated() -> None:
        z.grad = logits.grad = None
        out = gate(logits)
        v = gated_representation(z, out.mask, non_neg="rep_relu")
        loss = info_nce_loss(v, indexes, TEMPERATURE, check_inputs=False)
        loss = loss + 3e-5 * bernoulli_kl(out.probs, 0.8)
        loss.backward()

    steps = {"solo simclr_loss_func": solo} if solo_loss is not None else {}
    steps["solo_bayesncl info_nce_loss"] = ours
    steps["gated: gate+v+InfoNCE+KL"] = gated
    if solo_loss is not None:
        with torch.no_grad():
            diff = (
                info_nce_loss(F.normalize(z, dim=-1), indexes, TEMPERATURE)
                - solo_loss(z, indexes, TEMPERATURE)
            ).abs()
        print(f"{n_images} images x 2 views, k={k}: |ours - solo| loss value = {diff.item():.2e}")
    return steps


def run(repeats: int, warmup: int) -> None:
    solo_loss = _load_solo_loss()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, device cpu")
    print(f"forward + backward, median of {repeats} after {warmup} warm-up runs, T={TEMPERATURE}")
    results = []
    for n_images, k in CASES:
        steps = make_steps(n_images, k, solo_loss)
        results.append((n_images, k, median_seconds(steps, repeats, warmup)))
    header = f"{'batch':>8} {'k':>5} {'path':<28} {'median ms':>10} {'vs solo':>8}"
    print(header)
    print("-" * len(header))
    for n_images, k, medians in results:
        reference = medians.get("solo simclr_loss_func")
        for name, seconds in medians.items():
            ratio = f"{seconds / reference:.2f}" if reference else "-"
            print(f"{n_images:>6}x2 {k:>5} {name:<28} {seconds * 1e3:>10.2f} {ratio:>8}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    run(args.repeats, args.warmup)


if __name__ == "__main__":
    main()
