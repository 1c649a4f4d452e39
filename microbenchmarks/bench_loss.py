"""Times the InfoNCE loss of solo-bayesncl against solo-learn's SimCLR loss, and the gated path.

Forward + backward on the same random features, repeated after a warm-up, the paths interleaved
within every round. Reported per path: the median wall time and process CPU time (which leaves
out the time spent waiting for a core another process holds), and against solo-learn's
``simclr_loss_func`` measured in the same run the median of the per-round paired ratios, for
both clocks. Every path runs as the training steps do: through the loss modules
(``NCLLoss``, ``BayesNCLLoss``, built from the paper's settings as the methods build them), with
``check_inputs=False`` (no input check, which reads the device). The paths:

- ``solo simclr_loss_func``: ``normalize(z)``, then InfoNCE;
- ``solo_bayesncl info_nce_loss``: the same work, ``F.normalize`` then ``NCLLoss.contrast``;
- ``ncl: phi+norm+InfoNCE``: NCL's objective, ``normalize(rep_relu(z))`` then InfoNCE;
- ``gated: gate+v+InfoNCE+KL``: BayesNCL's objective, which on top of NCL's draws the gate
  (sigmoid and threshold), normalises the gated vector a second time and adds the KL: work that
  ``simclr_loss_func`` does not do; the ``gated`` row minus the ``ncl`` row is its cost.

Also prints the largest difference between solo-learn's loss value and ours (the same formula).

Usage::

    python microbenchmarks/bench_loss.py [--repeats 10] [--warmup 3] [--threads N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from solo_bayesncl.methods.keys import BayesNCLSettings, NCLSettings

CASES = ((256, 256), (512, 2048))  # (images per batch, feature dimension k); 2 views each
TEMPERATURE = 0.2
SOLO = "solo simclr_loss_func"


Timings = dict[str, dict[str, list[float]]]  # clock -> path -> seconds per round


def time_rounds(steps: dict[str, Callable[[], None]], repeats: int, warmup: int) -> Timings:
    """Wall and process CPU seconds of every step over ``repeats`` rounds after ``warmup``
    untimed ones.

    The steps run in turn within each round, so load from other processes affects them alike.
    """
    for _ in range(warmup):
        for step in steps.values():
            step()
    times: Timings = {"wall": {name: [] for name in steps}, "cpu": {name: [] for name in steps}}
    for _ in range(repeats):
        for name, step in steps.items():
            wall, cpu = time.perf_counter(), time.process_time()
            step()
            times["cpu"][name].append(time.process_time() - cpu)
            times["wall"][name].append(time.perf_counter() - wall)
    return times


def paired_ratio(times: list[float], reference: list[float]) -> float:
    """Median over rounds of ``times / reference`` measured in the same round."""
    return statistics.median(t / r for t, r in zip(times, reference, strict=True))


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
    dims = {"proj_hidden_dim": 2048, "proj_output_dim": k, "temperature": TEMPERATURE}
    ncl_loss = NCLSettings.from_kwargs(dims).objective(check_inputs=False)
    contrast = ncl_loss.contrast
    bayes = BayesNCLSettings.from_kwargs(dims).objective(check_inputs=False)

    def solo() -> None:
        z.grad = None
        solo_loss(z, indexes, TEMPERATURE).backward()

    def ours() -> None:
        z.grad = None
        contrast(F.normalize(z, dim=-1), indexes).backward()

    def ncl() -> None:
        z.grad = None
        ncl_loss(z, indexes).backward()

    def gated() -> None:  # BayesNCLLoss's terms, without its logged gate statistics
        z.grad = logits.grad = None
        out = bayes.gate(logits)
        kl = bayes.bayesian_kl_lambda * bayes.kl(out.probs)
        loss = bayes.contrast(bayes.gated(z, out), indexes) + kl
        loss.backward()

    steps = {SOLO: solo} if solo_loss is not None else {}
    steps["solo_bayesncl info_nce_loss"] = ours
    steps["ncl: phi+norm+InfoNCE"] = ncl
    steps["gated: gate+v+InfoNCE+KL"] = gated
    if solo_loss is not None:
        with torch.no_grad():
            diff = (
                contrast(F.normalize(z, dim=-1), indexes) - solo_loss(z, indexes, TEMPERATURE)
            ).abs()
        print(f"{n_images} images x 2 views, k={k}: |ours - solo| loss value = {diff.item():.2e}")
    return steps


def run(repeats: int, warmup: int) -> None:
    solo_loss = _load_solo_loss()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, device cpu")
    print(f"forward + backward, median of {repeats} after {warmup} warm-up runs, T={TEMPERATURE}")
    results = []
    loads = [os.getloadavg()[0]]
    for n_images, k in CASES:
        steps = make_steps(n_images, k, solo_loss)
        results.append((n_images, k, time_rounds(steps, repeats, warmup)))
    loads.append(os.getloadavg()[0])
    print(
        f"1-minute load average {loads[0]:.1f} before, {loads[1]:.1f} after, on "
        f"{os.cpu_count()} logical CPUs (above that, wall times are inflated: read the ratios)"
    )
    print("ratios: median over rounds of the path's time / solo's time in the same round")
    header = (
        f"{'batch':>8} {'k':>5} {'path':<28} {'wall ms':>9} {'cpu ms':>9} "
        f"{'wall/solo':>9} {'cpu/solo':>9}"
    )
    print(header)
    print("-" * len(header))
    for n_images, k, times in results:
        for name in times["wall"]:
            line = f"{n_images:>6}x2 {k:>5} {name:<28}"
            for clock in ("wall", "cpu"):
                line += f" {statistics.median(times[clock][name]) * 1e3:9.2f}"
            for clock in ("wall", "cpu"):
                reference = times[clock].get(SOLO)
                ratio = paired_ratio(times[clock][name], reference) if reference else None
                line += f" {ratio:9.2f}" if ratio is not None else f" {'-':>9}"
            print(line)


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
