"""Times BayesNCL's objective as training runs it against its plain definitions, on the CPU.

The question (tracker issue 67, "One loss that trains"): do the hand-written autograd kernels of
``core/fused_losses.py`` save at least 5% of a training step, or a stated share of its memory at
the paper's batch, over the plain PyTorch definitions of ``core/losses.py`` and ``core/gates.py``
differentiated by torch autograd? Three paths compute ``InfoNCE(normalize(u * m)) + lambda * KL``
(arXiv 2605.28441, section 3) on the same projector outputs and gate logits:

- ``fused``: ``BayesNCLLoss.terms``, the loss module as the method's training step runs it;
- ``plain``: the definitions (``gate_probabilities``, ``hard_threshold_ste``,
  ``gated_representation``, ``info_nce_loss``, ``bernoulli_kl``) under autograd;
- ``compiled``: the same definitions under ``torch.compile`` (only when a C++ compiler is on the
  PATH, which inductor needs on the CPU).

Measured, the paths interleaved in every round and the medians of the per-round paired ratios
against ``fused`` reported (wall and process CPU time):

1. the loss term alone, forward + backward, at the ``cpu`` benchmark preset's batch (256 images
   x 2 views, projector 2048 -> 256) and at 1,024 images;
2. the whole training step of the ``bayesncl`` method (ResNet-18 with the ImageNet stem on
   32 px images, as the ``cpu`` preset trains it: ``training_step`` + backward + LARS step,
   built as ``bench_train_step.py`` builds it) with its loss module on the fused or on the plain
   path, at the same two batches;
3. peak memory of the loss term, and of the whole step at the paper's CIFAR batch (256 images,
   small stem, projector 2048 -> 256), from the torch profiler's memory timeline.

Usage::

    python microbenchmarks/bench_loss_paths.py [--rounds 7] [--warmup 2] [--threads 0]
        [--batches 256 1024] [--no-step] [--no-memory]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import bench_train_step
import torch

from solo_bayesncl.core import fused_losses, gates
from solo_bayesncl.core.gates import bernoulli_kl, gate_probabilities, hard_threshold_ste
from solo_bayesncl.core.losses import (
    BayesNCLLoss,
    gated_representation,
    info_nce_loss,
    non_negative_representation,
)

TEMPERATURE, PRIOR, KL_LAMBDA, THRESHOLD, KL_EPS = 0.2, 0.8, 3e-5, 0.5, 0.01  # the paper's
NON_NEG, K, PAPER_BATCH = "rep_relu", 256, 256

Step = Callable[[], torch.Tensor]


def plain_loss(z: torch.Tensor, logits: torch.Tensor, indexes: torch.Tensor) -> torch.Tensor:
    """BayesNCL's loss by the plain definitions (the ``ste`` gate in training)."""
    probs = gate_probabilities(logits.float(), 1.0)
    v = gated_representation(z, hard_threshold_ste(probs, THRESHOLD), NON_NEG)
    nce = info_nce_loss(v, indexes, TEMPERATURE, gather_distributed=False, check_inputs=False)
    return nce + KL_LAMBDA * bernoulli_kl(probs, PRIOR, KL_EPS, check_inputs=False)


def fused_criterion() -> BayesNCLLoss:
    return BayesNCLLoss(
        TEMPERATURE, NON_NEG, prior=PRIOR, kl_lambda=KL_LAMBDA, check_inputs=False
    ).train()


def compiler_present() -> bool:
    return shutil.which("cc") is not None or shutil.which("g++") is not None


def loss_paths(n_images: int, compiled: bool) -> tuple[dict[str, Step], tuple[torch.Tensor, ...]]:
    """Forward + backward closures of each path on the same ``(2 n, K)`` inputs."""
    g = torch.Generator().manual_seed(n_images)
    z = torch.randn(2 * n_images, K, generator=g).requires_grad_(True)
    logits = (2.0 * torch.randn(2 * n_images, K, generator=g)).requires_grad_(True)
    indexes = torch.arange(n_images).repeat(2)
    criterion = fused_criterion()

    def run(loss_fn: Callable[..., torch.Tensor]) -> Step:
        def step() -> torch.Tensor:
            z.grad = logits.grad = None
            loss = loss_fn(z, logits, indexes)
            loss.backward()
            return loss.detach()

        return step

    paths = {"fused": run(lambda *a: criterion.terms(*a).loss), "plain": run(plain_loss)}
    if compiled:
        paths["compiled"] = run(torch.compile(plain_loss, dynamic=False))
    return paths, (z, logits, indexes)


@contextlib.contextmanager
def plain_objective(criterion: BayesNCLLoss) -> Iterator[None]:
    """Runs ``criterion`` (a method's loss module) on the plain definitions inside the block."""
    top_k = criterion.top_k
    replaced = {
        "representation": lambda z: non_negative_representation(z, criterion.non_neg, top_k),
        "masked": lambda z, m: gated_representation(z, m, criterion.non_neg, top_k),
        "contrast": lambda v, idx: info_nce_loss(
            v, idx, criterion.temperature, gather_distributed=False, check_inputs=False
        ),
        "kl": lambda p: bernoulli_kl(p, criterion.prior, criterion.kl_eps, check_inputs=False),
    }
    for name, fn in replaced.items():
        setattr(criterion, name, fn)
    gates.fused_losses = _PlainThreshold  # the gate's straight-through threshold
    try:
        yield
    finally:
        for name in replaced:
            delattr(criterion, name)
        gates.fused_losses = fused_losses


class _PlainThreshold:
    hard_threshold_ste = staticmethod(hard_threshold_ste)


def method_paths(n_images: int, small_stem: bool) -> dict[str, Step]:
    """The ``bayesncl`` method's whole training step with its loss on each path."""
    argv = ["--batch-size", str(n_images), "--image-size", "32", "--proj", "2048", str(K)]
    args = bench_train_step.parse_args(argv + (["--small-stem"] if small_stem else []))
    with tempfile.TemporaryDirectory() as data_dir:
        cfg = bench_train_step.build_cfg("bayesncl", args, Path(data_dir))
    device = torch.device("cpu")
    model = bench_train_step.build_model(cfg, device)
    batch = bench_train_step.make_batch(args, int(cfg.data.num_classes), device)
    step = bench_train_step.make_step(model, batch, device, "32")

    def plain() -> torch.Tensor:
        with plain_objective(model.objective):
            return step()

    return {"fused": step, "plain": plain}


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
    """Median times per path and paired ratios against ``fused``; with ``losses``, the loss
    each path gave on the same inputs (a training step's inputs change with every step)."""
    print(title)
    head = f"  {'path':<9} {'wall ms':>9} {'cpu ms':>9} {'wall/fused':>10} {'cpu/fused':>10}"
    print(head + ("  loss" if losses else ""))
    for name in times["wall"]:
        line = f"  {name:<9}"
        for clock in ("wall", "cpu"):
            line += f" {statistics.median(times[clock][name]) * 1e3:9.1f}"
        for clock in ("wall", "cpu"):
            pairs = zip(times[clock][name], times[clock]["fused"], strict=True)
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
    print("ratios: median over rounds of the path's time / the fused path's in the same round\n")
    loads = [os.getloadavg()[0]]
    step_medians: dict[int, float] = {}
    for n in args.batches:
        paths, _ = loss_paths(n, compiled)
        times = time_rounds(paths, args.rounds, args.warmup)
        report(f"loss term, forward + backward: {n} images x 2 views, k={K}", times)
        saved = statistics.median(times["wall"]["plain"]) - statistics.median(
            times["wall"]["fused"]
        )
        if args.step:
            method = time_rounds(method_paths(n, small_stem=False), args.rounds, args.warmup)
            title = f"bayesncl training step: {n} images x 2 views of 32 px, ResNet-18"
            report(title, method, losses=False)
            step_medians[n] = statistics.median(method["wall"]["fused"])
            print(
                f"  the fused loss saves {saved * 1e3:.1f} ms of the loss term: "
                f"{saved / step_medians[n]:.2%} of the fused step's median"
            )
        print()
        loads.append(os.getloadavg()[0])
    if args.memory:
        print(f"peak memory at the paper's batch ({PAPER_BATCH} images x 2 views, k={K}):")
        paths, _ = loss_paths(PAPER_BATCH, compiled=False)
        for name, step in paths.items():
            print(f"  loss term, {name:<5}: {peak_memory(step):8.1f} MiB")
        for name, step in method_paths(PAPER_BATCH, small_stem=True).items():
            mib = peak_memory(step)
            print(f"  training step (small stem), {name:<5}: {mib:8.1f} MiB")
        print()
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
