"""Times BayesNCL's loss as training runs it, under autograd and under ``torch.compile``, on the CPU.

Training runs the plain definitions of ``core/losses.py`` and ``core/gates.py`` under torch
autograd (``BayesNCLLoss``). Until commit ``1e9cdab`` it ran hand-written autograd kernels
(``core/fused_losses.py``); that commit's version of this script timed them against the
definitions, and they were removed: they saved no memory at a step's peak and a fraction of a
percent of its time (tracker issue 67, "One loss that trains"; the figures are in
docs/benchmark.md, "Micro-benchmarks"). To rerun that comparison: ``git archive 1e9cdab | tar -x -C DIR`` and run
this script there with ``PYTHONPATH=DIR``. Two paths compute
``InfoNCE(normalize(u * m)) + lambda * KL`` (arXiv 2605.28441, section 3) on the same projector
outputs and gate logits:

- ``plain``: ``BayesNCLLoss.terms``, the loss module as the method's training step runs it;
- ``compiled``: the same under ``torch.compile`` (only when a C++ compiler is on the PATH,
  which inductor needs on the CPU).

Measured, the paths interleaved in every round and the medians of the per-round paired ratios
against ``plain`` reported (wall and process CPU time):

1. the loss term alone, forward + backward, at the ``cpu`` benchmark preset's batch (256 images
   x 2 views, projector 2048 -> 256) and at 1,024 images;
2. the whole training step of the ``bayesncl`` method (ResNet-18 with the ImageNet stem on
   32 px images, as the ``cpu`` preset trains it: ``training_step`` + backward + LARS step,
   built as ``bench_train_step.py`` builds it), to show the loss term's share of a step;
3. peak memory of the loss term, and of the whole step at the paper's CIFAR batch (256 images,
   small stem, projector 2048 -> 256), from the torch profiler's memory timeline.

Run it with the checkout on ``PYTHONPATH`` (the script's folder comes first on ``sys.path``).

Usage::

    PYTHONPATH=. python microbenchmarks/bench_loss_paths.py [--rounds 7] [--warmup 2]
        [--threads 0] [--batches 256 1024] [--no-step] [--no-memory]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import bench_train_step
import torch

from solo_bayesncl.core.losses import BayesNCLLoss

K, PAPER_BATCH = 256, 256

Step = Callable[[], torch.Tensor]


def criterion() -> BayesNCLLoss:
    """BayesNCL's loss at the paper's settings, as the method builds it."""
    from solo_bayesncl.methods.keys import BayesNCLSettings  # imports solo-learn: after the set-up

    settings = BayesNCLSettings.from_kwargs({"proj_hidden_dim": 2048, "proj_output_dim": K})
    return settings.objective(check_inputs=False).train()


def compiler_present() -> bool:
    return shutil.which("cc") is not None or shutil.which("g++") is not None


def loss_paths(n_images: int, compiled: bool) -> dict[str, Step]:
    """Forward + backward closures of each path on the same ``(2 n, K)`` inputs."""
    g = torch.Generator().manual_seed(n_images)
    z = torch.randn(2 * n_images, K, generator=g).requires_grad_(True)
    logits = (2.0 * torch.randn(2 * n_images, K, generator=g)).requires_grad_(True)
    indexes = torch.arange(n_images).repeat(2)
    loss = criterion()

    def run(loss_fn: Callable[..., torch.Tensor]) -> Step:
        def step() -> torch.Tensor:
            z.grad = logits.grad = None
            value = loss_fn(z, logits, indexes)
            value.backward()
            return value.detach()

        return step

    paths = {"plain": run(loss)}
    if compiled:
        paths["compiled"] = run(torch.compile(loss, dynamic=False))
    return paths


def method_step(n_images: int, small_stem: bool) -> Step:
    """The ``bayesncl`` method's whole training step."""
    argv = ["--batch-size", str(n_images), "--image-size", "32", "--proj", "2048", str(K)]
    args = bench_train_step.parse_args(argv + (["--small-stem"] if small_stem else []))
    with tempfile.TemporaryDirectory() as data_dir:
        cfg = bench_train_step.build_cfg("bayesncl", args, Path(data_dir))
    device = torch.device("cpu")
    model = bench_train_step.build_model(cfg, device)
    batch = bench_train_step.make_batch(args, int(cfg.data.num_classes), device)
    return bench_train_step.make_step(model, batch, device, "32")


def time_rounds(paths: dict[str, Step], rounds: int, warmup: int) -> dict[str, dict[str, list]]:
    """Wall and CPU seconds per path over ``rounds`` rounds after ``warmup``, the order
    rotating each round, and the loss of each path's first call."""
    names = list(paths)
    times: dict[str, dict[str, list]] = {c: {n: [] for n in names} for c in ("wall", "cpu", "loss")}
    for r in range(warmup + rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            wall, cpu = time.perf_counter(), time.process_time()
            loss = paths[name]()
            elapsed, elapsed_cpu = time.perf_counter() - wall, time.process_time() - cpu
            if r == 0:
                times["loss"][name].append(float(loss))
            if r >= warmup:
                times["wall"][name].append(elapsed)
                times["cpu"][name].append(elapsed_cpu)
    return times


def report(title: str, times: dict[str, dict[str, list]], losses: bool = True) -> None:
    """Median times per path and paired ratios against ``plain``; with ``losses``, the loss
    each path gave on the same inputs (a training step's inputs change with every step)."""
    print(title)
    head = f"  {'path':<9} {'wall ms':>9} {'cpu ms':>9} {'wall/plain':>10} {'cpu/plain':>10}"
    print(head + ("  loss" if losses else ""))
    for name in times["wall"]:
        line = f"  {name:<9}"
        for clock in ("wall", "cpu"):
            line += f" {statistics.median(times[clock][name]) * 1e3:9.1f}"
        for clock in ("wall", "cpu"):
            pairs = zip(times[clock][name], times[clock]["plain"], strict=True)
            line += f" {statistics.median(t / f for t, f in pairs):10.3f}"
        print(f"{line}  {times['loss'][name][0]:.9g}" if losses else line)


def peak_memory(step: Step) -> float:
    """Peak MiB of tensors alive during ``step`` (inputs and parameters included), from the
    torch profiler's memory timeline of the CPU."""
    from torch.profiler import ProfilerActivity, profile
    from torch.profiler._memory_profiler import MemoryProfileTimeline

    step()  # warm: lazily made buffers (optimizer state) exist before the profiled step
    with profile(
        activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True, with_stack=True
    ) as prof:
        step()
    _, sizes = MemoryProfileTimeline(prof._memory_profile())._coalesce_timeline("cpu")
    return max(sum(row) for row in sizes) / 2**20


def run(args: argparse.Namespace) -> None:
    compiled = compiler_present()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, device cpu")
    print(f"torch.compile: {'timed' if compiled else 'skipped (no C++ compiler on the PATH)'}")
    print(f"median of {args.rounds} interleaved rounds after {args.warmup} warm-up rounds;")
    print("ratios: median over rounds of the path's time / the plain path's in the same round\n")
    loads = [os.getloadavg()[0]]
    for n in args.batches:
        times = time_rounds(loss_paths(n, compiled), args.rounds, args.warmup)
        report(f"loss term, forward + backward: {n} images x 2 views, k={K}", times)
        if args.step:
            step = time_rounds({"plain": method_step(n, small_stem=False)}, args.rounds, 1)
            title = f"bayesncl training step: {n} images x 2 views of 32 px, ResNet-18"
            report(title, step, losses=False)
            share = statistics.median(times["wall"]["plain"]) / statistics.median(
                step["wall"]["plain"]
            )
            print(f"  the loss term is {share:.2%} of the step's median")
        print()
        loads.append(os.getloadavg()[0])
    if args.memory:
        print(f"peak memory at the paper's batch ({PAPER_BATCH} images x 2 views, k={K}):")
        mib = peak_memory(loss_paths(PAPER_BATCH, compiled=False)["plain"])
        print(f"  loss term: {mib:8.1f} MiB")
        mib = peak_memory(method_step(PAPER_BATCH, small_stem=True))
        print(f"  training step (small stem): {mib:8.1f} MiB\n")
    print(
        f"1-minute load average {min(loads):.1f} to {max(loads):.1f} on {os.cpu_count()} logical "
        "CPUs (above that, wall times are inflated: read the ratios and CPU times)"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's own)")
    parser.add_argument("--batches", type=int, nargs="+", default=[256, 1024])
    parser.add_argument("--no-step", dest="step", action="store_false")
    parser.add_argument("--no-memory", dest="memory", action="store_false")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error(f"--rounds must be >= 1, got {args.rounds}")
    bench_train_step.prepare_process(args.threads)
    import solo_bayesncl  # noqa: F401  (registers bayesncl with solo-learn)

    run(args)


if __name__ == "__main__":
    main()
