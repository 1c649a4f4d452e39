"""Times one full training step of the bayesncl, ncl and simclr solo-learn methods, in one run.

Each method is built from its shipped CIFAR config (``scripts/pretrain/cifar/<method>.yaml``,
composed with Hydra and checked by :func:`solo_bayesncl.training.pretrain.prepare_pretrain`), set
up as the pretraining entry point sets it up (:func:`solo_bayesncl.training.fit.seed_and_layout`:
seeded with the config's seed, small stem on request, contiguous parameters, channels-last unless
disabled, convolutions on maps of a few pixels as matrix products unless disabled) and put in train mode. One
step is what Lightning runs per batch: ``training_step`` on ``(indexes, [x1, x2], targets)`` (both views through backbone, projector,
gating head, loss and the online classifier), ``backward`` and the optimizer step, with the
optimizer returned by the method's own ``configure_optimizers`` (LARS, its parameter groups, the
gating head's own learning rate, bias and norm excluded from weight decay). No Lightning trainer
is attached: the learning-rate scheduler is switched off on the instance (``scheduler = "none"``)
so that ``configure_optimizers`` returns the optimizer alone, and ``log``/``log_dict`` are no-ops.

The methods run interleaved, one step each per round, the order rotating every round (ABC, BCA,
CAB, ...), so that load from other processes falls on all of them alike. Reported: median and
interquartile range of the step time per method, the ratios bayesncl/ncl and bayesncl/simclr
(ratio of medians and the median of the per-round paired ratios, with its IQR), and a verdict
against the target of at most 3% over ncl (the paper reports +6% on CIFAR-100 and +13% on
ImageNet-100, arXiv 2605.28441). Also parameter counts and, on CUDA, peak memory per method.
``--breakdown`` times bayesncl's extra pieces on their own (gating head forward and backward,
gate, KL, gated normalisation) to show where an overhead comes from. Also printed: the FLOPs of
one step per method as ``torch.utils.flop_counter.FlopCounterMode`` counts them, the GFLOP/s
reached at the median step time and its share of the fp32 limit (on CPU estimated from
``/proc/cpuinfo``, or ``--peak-gflops``). ``--compare-memory-format`` adds bayesncl with the other
memory format (channels-last against contiguous, ``performance.disable_channel_last``);
``--compile`` sets ``performance.compile`` (the backbone's training forward compiled with
``torch.compile``) for every method, ``--compare-compile`` adds bayesncl with the other setting;
with both comparisons, also the two flipped together. ``--compare-small-map-convs`` adds bayesncl
with ``performance.small_map_convs`` flipped (the convolutions whose input has no more pixels than
their kernel has taps computed as matrix products or as convolutions). The
first step of each, where compiling happens, is printed apart.

Usage::

    python microbenchmarks/bench_train_step.py [--batch-size 64] [--image-size 32] [--steps 10]
        [--warmup 3] [--threads 1] [--device cpu|cuda] [--precision 32|bf16|16]
        [--backbone resnet18] [--small-stem] [--proj 2048 256] [--images random|fashion-mnist]
        [--breakdown] [--compare-memory-format] [--compile] [--compare-compile]
        [--compare-small-map-convs] [--peak-gflops G]
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import logging
import os
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf

REPO = Path(__file__).resolve().parents[1]
CONFIG_DIR = REPO / "scripts" / "pretrain" / "cifar"
METHODS = ("bayesncl", "ncl", "simclr")
TARGET_OVERHEAD = 0.03  # bayesncl at most 3% slower than ncl per step
PAPER_OVERHEAD = {"CIFAR-100": 0.06, "ImageNet-100": 0.13}
PRECISIONS = ("32", "bf16", "16")
SECTIONS = ("forward", "backward", "optimizer")

Batch = tuple[torch.Tensor, list[torch.Tensor], torch.Tensor]


def compose_cfg(name: str, overrides: list[str]):
    """Composes ``scripts/pretrain/cifar/<name>.yaml`` with Hydra, as ``main_pretrain.py`` does."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.2"):
        return compose(config_name=f"{name}.yaml", overrides=overrides)


def build_cfg(name: str, args: argparse.Namespace, data_dir: Path):
    """The shipped config of ``name`` at the benchmark's size, checked like a real run."""
    from solo_bayesncl.training.pretrain import prepare_pretrain

    hidden, output = args.proj
    overrides = [
        "data.dataset=custom",
        f"data.train_path={data_dir}",
        f"data.val_path={data_dir}",
        "data.num_workers=0",
        f"optimizer.batch_size={args.batch_size}",
        f"method_kwargs.proj_hidden_dim={hidden}",
        f"method_kwargs.proj_output_dim={output}",
        f"backbone.name={args.backbone}",
        f"+backbone.small_stem={args.small_stem}",
        f"accelerator={'gpu' if args.device == 'cuda' else 'cpu'}",
        f"++performance.compile={args.compile}",  # checked as pretraining checks it
        "wandb.enabled=False",
    ]
    return prepare_pretrain(compose_cfg(name, overrides), check_data=False).solo


def build_model(cfg, device: torch.device) -> torch.nn.Module:
    """The method in train mode, set up as :func:`solo_bayesncl.training.pretrain.pretrain` does
    (the compiling, when ``performance.compile`` asks for it, comes after the FLOPs are counted:
    :func:`compile_if_asked`)."""
    from solo_bayesncl.config.settings import run_spec
    from solo_bayesncl.host.models import build_method
    from solo_bayesncl.training.fit import seed_and_layout

    # cfg.seed is the shipped configs' for every method: the same backbone and projector
    seed_notice = logging.getLogger("lightning.fabric.utilities.seed")  # "Seed set to ..."
    level = seed_notice.level
    seed_notice.setLevel(logging.WARNING)
    try:
        spec = run_spec(cfg)
        model = seed_and_layout(
            spec.trainer.seed,
            spec.trainer.performance,
            lambda: build_method(spec.method.name, cfg, spec.method.small_stem),
        )
    finally:
        seed_notice.setLevel(level)
    model.log = lambda *a, **k: None  # no trainer to log to
    model.log_dict = lambda *a, **k: None
    return model.to(device).train()


def compile_if_asked(model: torch.nn.Module, cfg) -> bool:
    """Compiles the backbone's training forward when ``performance.compile`` asks for it, as the
    pretraining does; returns whether it did."""
    from solo_bayesncl.training.compiled import compile_training_forward

    if not compile_wanted(cfg):
        return False
    compile_training_forward(model.backbone)
    return True


def build_optimizer(model: torch.nn.Module) -> torch.optim.Optimizer:
    """The method's own ``configure_optimizers`` optimizer, without the trainer-bound scheduler."""
    model.scheduler = "none"
    optimizer = model.configure_optimizers()
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"configure_optimizers returned {type(optimizer).__name__}")
    return optimizer


def count_parameters(model: torch.nn.Module) -> dict[str, int]:
    """Trainable parameters: total and per top-level module."""
    counts = {"total": sum(p.numel() for p in model.parameters() if p.requires_grad)}
    for name, child in model.named_children():
        n = sum(p.numel() for p in child.parameters() if p.requires_grad)
        if n:
            counts[name] = n
    return counts


def make_batch(args: argparse.Namespace, num_classes: int, device: torch.device) -> Batch:
    """``(indexes, [x1, x2], targets)``: normalised random images, or Fashion-MNIST images and
    their mirror images (step time does not depend on the pixels; this checks it runs on real
    data)."""
    b, s = args.batch_size, args.image_size
    g = torch.Generator().manual_seed(0)
    if args.images == "fashion-mnist":
        import torch.nn.functional as F

        from solo_bayesncl.data.fashion_mnist import FashionMNIST

        data = FashionMNIST("val", limit=b)
        if len(data) < b:
            raise ValueError(f"--batch-size {b} is more than the {len(data)} images available")
        x = (
            torch.from_numpy(data.images[:b].copy())
            .float()
            .div(255.0)[:, None]
            .expand(-1, 3, -1, -1)
        )
        x1 = (F.interpolate(x, size=(s, s), mode="bilinear", align_corners=False) - 0.5) / 0.5
        x2 = torch.flip(x1, dims=[3])
        targets = torch.from_numpy(data.targets[:b].copy()) % num_classes
    else:
        x1 = torch.randn(b, 3, s, s, generator=g)
        x2 = torch.randn(b, 3, s, s, generator=g)
        targets = torch.randint(0, num_classes, (b,), generator=g)
    return (
        torch.arange(b, device=device),
        [x1.contiguous().to(device), x2.contiguous().to(device)],
        targets.to(device),
    )


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    """Mixed-precision context for ``precision`` (``32`` is full float32)."""
    if precision == "32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)


def make_step(
    model: torch.nn.Module, batch: Batch, device: torch.device, precision: str
) -> Callable[..., torch.Tensor]:
    """One optimisation step as Lightning runs it; returns the loss.

    Given a ``sections`` dict, the step also appends the time of its forward (``training_step``),
    backward and optimizer step to it, synchronising the device in between.
    """
    optimizer = build_optimizer(model)
    scaler = torch.amp.GradScaler(device.type) if precision == "16" else None

    def step(sections: dict[str, list[float]] | None = None) -> torch.Tensor:
        marks = [time.perf_counter()]

        def mark() -> None:
            if sections is not None:
                synchronize(device)
                marks.append(time.perf_counter())

        optimizer.zero_grad(set_to_none=True)  # solo-learn's optimizer_zero_grad
        with autocast(device, precision):
            loss = model.training_step(batch, 0)
        mark()
        if scaler is None:
            loss.backward()
            mark()
            optimizer.step()
        else:
            scaler.scale(loss).backward()
            mark()
            scaler.step(optimizer)
            scaler.update()
        mark()
        if sections is not None:
            for name, t0, t1 in zip(SECTIONS, marks[:-1], marks[1:], strict=True):
                sections.setdefault(name, []).append(t1 - t0)
        return loss.detach()

    return step


def count_step_flops(model: torch.nn.Module, batch: Batch, precision: str) -> int:
    """FLOPs of one ``training_step`` and its backward, as ``torch.utils.flop_counter.
    FlopCounterMode`` counts them (matrix products and convolutions, 2 per multiply-add; the
    element-wise work is not counted). Runs one step without the optimizer update."""
    from torch.utils.flop_counter import FlopCounterMode

    device = batch[0].device
    model.zero_grad(set_to_none=True)
    with FlopCounterMode(display=False) as counter:
        with autocast(device, precision):
            loss = model.training_step(batch, 0)
        loss.backward()
    model.zero_grad(set_to_none=True)
    return counter.get_total_flops()


def cpu_peak_gflops(cores: int) -> tuple[float, str]:
    """fp32 peak of ``cores`` cores from ``/proc/cpuinfo`` (Linux): clock x FLOPs per cycle, with
    64 per cycle for Intel AVX-512 (two 512-bit FMA units), 32 for AVX2/FMA and for AMD's
    AVX-512 (Zen 4 runs 512-bit FMAs on two 256-bit units). Returns the figure and how it was
    reached; 0 when the file cannot tell."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return 0.0, "no /proc/cpuinfo: pass --peak-gflops"

    def first(field: str) -> str:
        for line in text.splitlines():
            if line.startswith(field):
                return line.split(":", 1)[1].strip()
        return ""

    flags, vendor = first("flags").split(), first("vendor_id")
    try:
        ghz = float(first("cpu MHz")) / 1000
    except ValueError:
        return 0.0, "no clock in /proc/cpuinfo: pass --peak-gflops"
    if "avx512f" in flags and vendor == "GenuineIntel":
        per_cycle, unit = 64, "Intel AVX-512, 2 FMA units"
    elif "fma" in flags:
        per_cycle, unit = (
            32,
            "AVX-512 on 256-bit FMA units (AMD)" if "avx512f" in flags else "AVX2 FMA",
        )
    else:
        per_cycle, unit = 8, "SSE"
    peak = cores * per_cycle * ghz
    return peak, f"{cores} cores x {ghz:.2f} GHz x {per_cycle} FLOP/cycle ({unit})"


def report_flops(
    flops: dict[str, int], wall: dict[str, list[float]], peak: float, how: str
) -> None:
    """FLOPs per step, achieved GFLOP/s at the median step time and the share of ``peak``."""
    print("FLOPs per step (torch.utils.flop_counter.FlopCounterMode over training_step + backward:")
    print("matrix products and convolutions, 2 per multiply-add; element-wise work not counted)")
    print(f"limit: {peak:.0f} GFLOP/s fp32 = {how}" if peak else f"limit: unknown ({how})")
    for name, count in flops.items():
        rate = count / statistics.median(wall[name]) / 1e9
        share = f", {rate / peak:.2f} of the limit" if peak else ""
        print(f"  {name:<{width(flops)}} {count / 1e9:8.1f} GFLOP  {rate:7.1f} GFLOP/s{share}")
    if "bayesncl" in flops and "ncl" in flops:
        print(
            f"  bayesncl/ncl FLOP ratio {flops['bayesncl'] / flops['ncl']:.3f}: the step-time "
            "ratio's floor where the step is bound by these products"
        )
    print()


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_interleaved(
    steps: dict[str, Callable[[], Any]], rounds: int, warmup: int, device: torch.device
) -> tuple[dict[str, list[float]], dict[str, list[float]], dict[str, int]]:
    """Wall and process CPU time of every step over ``rounds`` rounds after ``warmup`` untimed ones.

    One step of each method per round, the order rotating each round. Returns the wall times, the
    CPU times (on a shared CPU machine with one intra-op thread, the compute of the step without
    the time the process waited for a core) and, on CUDA, the peak memory (bytes) per method.
    """
    names = list(steps)
    wall: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, list[float]] = {name: [] for name in names}
    peak: dict[str, int] = dict.fromkeys(names, 0)
    for r in range(warmup + rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
            synchronize(device)
            start, start_cpu = time.perf_counter(), time.process_time()
            loss = steps[name]()
            synchronize(device)
            elapsed, elapsed_cpu = time.perf_counter() - start, time.process_time() - start_cpu
            if not torch.isfinite(torch.as_tensor(loss)).all():
                raise FloatingPointError(f"{name}: non-finite output in round {r}")
            if device.type == "cuda":
                peak[name] = max(peak[name], torch.cuda.max_memory_allocated(device))
            if r >= warmup:
                wall[name].append(elapsed)
                cpu[name].append(elapsed_cpu)
    return wall, cpu, peak


def quartiles(values: list[float]) -> tuple[float, float, float]:
    """(first quartile, median, third quartile)."""
    if len(values) == 1:
        return values[0], values[0], values[0]
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3


def load_summary(loads: list[float]) -> str:
    """The machine's 1-minute load averages sampled during a run, median and range, with a
    warning when the median exceeds the logical CPUs (wall times are then inflated)."""
    _, med, _ = quartiles(loads)
    cores = os.cpu_count() or 1
    line = (
        f"1-minute load average during the run: median {med:.1f} (min {min(loads):.1f}, "
        f"max {max(loads):.1f}) on {cores} logical CPUs"
    )
    if med > cores:
        line += (
            ": the machine was busy, wall times are inflated; compare CPU times and paired ratios"
        )
    return line


def verdict(paired: list[float]) -> str:
    """The 3%-target verdict from the per-round paired ratios bayesncl/ncl."""
    q1, med, q3 = quartiles(paired)
    limit = 1.0 + TARGET_OVERHEAD
    if q3 <= limit:
        return f"MEETS the target (<= {limit:.2f}x ncl): median {med:.3f}, IQR up to {q3:.3f}"
    if q1 > limit:
        return f"MISSES the target (<= {limit:.2f}x ncl): median {med:.3f}, IQR from {q1:.3f}"
    word = "within" if med <= limit else "over"
    return (
        f"median {med:.3f} is {word} the target ({limit:.2f}x ncl), but the IQR "
        f"[{q1:.3f}, {q3:.3f}] straddles it: inconclusive at this noise level"
    )


def time_sections(
    steps: dict[str, Callable[..., torch.Tensor]], rounds: int, device: torch.device
) -> None:
    """Median forward / backward / optimizer time of every method, interleaved as above."""
    sections: dict[str, dict[str, list[float]]] = {name: {} for name in steps}
    sectioned = {name: (lambda s=step, d=sections[name]: s(d)) for name, step in steps.items()}
    time_interleaved(sectioned, rounds, 0, device)
    print(f"\nsections (median of {rounds} more rounds, device synchronised between sections)")
    print(f"{'method':<9}" + "".join(f" {name + ' ms':>13}" for name in SECTIONS))
    medians = {
        m: {k: statistics.median(v) for k, v in secs.items()} for m, secs in sections.items()
    }
    for method, med in medians.items():
        print(f"{method:<9}" + "".join(f" {med[name] * 1e3:13.2f}" for name in SECTIONS))
    diff = "".join(
        f" {(medians['bayesncl'][k] - medians['ncl'][k]) * 1e3:+13.2f}" for k in SECTIONS
    )
    print(f"{'bay-ncl':<9}{diff}")


def breakdown(
    model: torch.nn.Module,
    batch: Batch,
    device: torch.device,
    precision: str,
    rounds: int,
    ncl_step: float,
) -> None:
    """Times bayesncl's extra work alone, on the backbone features of the batch, and compares
    its sum with ``ncl_step`` (ncl's median step time, seconds)."""
    with torch.no_grad(), autocast(device, precision):
        feats = torch.cat([model.backbone(x) for x in batch[1]])
        z = model.projector(feats).detach()
    head = model.gating_head
    zr = z.clone().requires_grad_(True)

    def head_forward() -> torch.Tensor:
        with torch.no_grad(), autocast(device, precision):
            return head(feats)

    def head_fwd_bwd() -> torch.Tensor:
        head.zero_grad(set_to_none=True)
        with autocast(device, precision):
            out = head(feats.detach())
        out.float().sum().backward()
        return out.detach()

    logits = head_forward().float().requires_grad_(True)

    def gate_kl_norm() -> torch.Tensor:
        zr.grad = logits.grad = None
        gate = model.gate_output(logits, "hard")
        v = model.objective.gated(zr, gate)  # as in training
        kl = model.objective.kl(gate.probs)
        (v.sum() + model.settings.bayesian_kl_lambda * kl).backward()
        return kl.detach()

    def ncl_norm() -> torch.Tensor:
        zr.grad = None
        u = model.objective.representation(zr)
        u.sum().backward()
        return u.detach().sum()

    pieces = {
        "gating head forward": head_forward,
        "gating head fwd+bwd": head_fwd_bwd,
        "gate+KL+gated norm fwd+bwd": gate_kl_norm,
        "ncl norm alone fwd+bwd": ncl_norm,
    }
    times, _, _ = time_interleaved(pieces, rounds, 2, device)
    print(f"\nbayesncl extra work alone ({feats.shape[0]} vectors, median of {rounds}):")
    for name, t in times.items():
        print(f"  {name:<28} {statistics.median(t) * 1e3:9.2f} ms")
    med = {name: statistics.median(t) for name, t in times.items()}
    extra = (
        med["gating head fwd+bwd"]
        + med["gate+KL+gated norm fwd+bwd"]
        - med["ncl norm alone fwd+bwd"]
    )
    print(
        f"  extra forward+backward work: {extra * 1e3:.2f} ms = {extra / ncl_step:+.1%} of ncl's "
        "median step (the gating head's optimizer update comes on top)"
    )


def variant_cfgs(cfg, args: argparse.Namespace) -> dict[str, Any]:
    """bayesncl's configs with the other memory format and/or the other compile setting, named
    by what differs from ``cfg`` (``--compare-memory-format``, ``--compare-compile``)."""
    flips = []
    if args.compare_memory_format:
        flips.append(("memory",))
    if args.compare_compile:
        flips.append(("compile",))
    if args.compare_memory_format and args.compare_compile:
        flips.append(("memory", "compile"))
    if args.compare_small_map_convs:
        flips.append(("small maps",))
    variants: dict[str, Any] = {}
    for flip in flips:
        other = copy.deepcopy(cfg)
        if "memory" in flip:
            other.performance.disable_channel_last = not other.performance.disable_channel_last
        if "compile" in flip:
            other.performance.compile = not compile_wanted(cfg)
        if "small maps" in flip:
            OmegaConf.update(other, "performance.small_map_convs", not small_map_wanted(cfg))
        parts = []
        if "memory" in flip:
            parts.append(memory_format_name(other))
        if "compile" in flip:
            parts.append(compiled_name(compile_wanted(other)))
        if "small maps" in flip:
            parts.append(small_map_name(small_map_wanted(other)))
        variants[f"bayesncl {', '.join(parts)}"] = other
    return variants


def compile_wanted(cfg) -> bool:
    """Whether ``cfg``'s ``performance.compile`` compiles the backbone's training forward."""
    from solo_bayesncl.config.runtime import performance_settings

    return performance_settings(cfg.get("performance"), str(cfg.get("accelerator"))).compile


def small_map_wanted(cfg) -> bool:
    """Whether ``cfg``'s ``performance.small_map_convs`` computes the convolutions on maps of
    a few pixels as matrix products."""
    from solo_bayesncl.config.runtime import performance_settings

    return performance_settings(cfg.get("performance"), "").small_map_convs


def small_map_name(as_products: bool) -> str:
    return "small-map convs as products" if as_products else "small-map convs as convolutions"


def compiled_name(compiled: bool) -> str:
    return "compiled" if compiled else "eager"


def variant_label(cfg, compiled: bool) -> str:
    return f"{memory_format_name(cfg)}, {compiled_name(compiled)}"


def width(names: Any) -> int:
    return max(9, *(len(n) for n in names))


def first_steps(steps: dict[str, Callable[[], Any]], device: torch.device) -> dict[str, float]:
    """Wall time of each step's very first call (where ``torch.compile`` compiles)."""
    first = {}
    for name, step in steps.items():
        synchronize(device)
        start = time.perf_counter()
        step()
        synchronize(device)
        first[name] = time.perf_counter() - start
    return first


def memory_format_name(cfg) -> str:
    """``contiguous`` or ``channels-last``, as the pretraining entry point lays out the model."""
    return "contiguous" if cfg.performance.disable_channel_last else "channels-last"


def report(title: str, times: dict[str, list[float]], peak: dict[str, int] | None) -> None:
    """Median and IQR per method, the bayesncl ratios and the verdict against the target."""
    print(f"{title}:")
    w = width(times)
    header = f"{'method':<{w}} {'median ms':>10} {'q1 ms':>9} {'q3 ms':>9} {'IQR %':>6}"
    if peak is not None:
        header += f" {'peak MiB':>9}"
    print(header)
    print("-" * len(header))
    for name, t in times.items():
        q1, med, q3 = quartiles(t)
        line = (
            f"{name:<{w}} {med * 1e3:10.2f} {q1 * 1e3:9.2f} {q3 * 1e3:9.2f} {(q3 - q1) / med:6.1%}"
        )
        if peak is not None:
            line += f" {peak[name] / 2**20:9.0f}"
        print(line)
    for ref in ("ncl", "simclr"):
        paired = [b / r for b, r in zip(times["bayesncl"], times[ref], strict=True)]
        q1, med, q3 = quartiles(paired)
        of_medians = statistics.median(times["bayesncl"]) / statistics.median(times[ref])
        print(
            f"bayesncl/{ref:<6}: ratio of medians {of_medians:.3f}; "
            f"paired per round: median {med:.3f}, IQR [{q1:.3f}, {q3:.3f}]"
        )
    paired_ncl = [b / n for b, n in zip(times["bayesncl"], times["ncl"], strict=True)]
    paper = ", ".join(f"+{v:.0%} {k}" for k, v in PAPER_OVERHEAD.items())
    print(f"verdict: {verdict(paired_ncl)} (paper: {paper})\n")


def run(args: argparse.Namespace) -> None:
    device = torch.device(args.device)
    with tempfile.TemporaryDirectory() as data_dir:
        cfgs = {name: build_cfg(name, args, Path(data_dir)) for name in METHODS}
    cfgs.update(variant_cfgs(cfgs["bayesncl"], args))
    models = {name: build_model(cfg, device) for name, cfg in cfgs.items()}
    batch = make_batch(args, int(cfgs["ncl"].data.num_classes), device)
    flops = {name: count_step_flops(m, batch, args.precision) for name, m in models.items()}
    compiled = {name: compile_if_asked(m, cfgs[name]) for name, m in models.items()}
    steps = {name: make_step(m, batch, device, args.precision) for name, m in models.items()}

    threads = f"{torch.get_num_threads()} threads" if device.type == "cpu" else ""
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else ""
    print(f"torch {torch.__version__}, device {device} {gpu}{threads}, precision {args.precision}")
    hidden, output = args.proj
    stem = "small 3x3 stem" if args.small_stem else "ImageNet stem (data.dataset=custom)"
    print(
        f"{args.backbone} ({stem}), {args.batch_size} images x 2 views of "
        f"{args.image_size}px ({args.images}), projector {hidden}/{output}, "
        f"optimizer {cfgs['bayesncl'].optimizer.name}"
    )
    print(
        f"memory format: {memory_format_name(cfgs['bayesncl'])} (performance.disable_channel_last)"
    )
    print(
        f"backbone training forward: {compiled_name(compiled['bayesncl'])} "
        f"(performance.compile={args.compile})"
    )
    print(f"{small_map_name(small_map_wanted(cfgs['bayesncl']))} (performance.small_map_convs)")
    print(f"one step = training_step + backward + optimizer step; {args.steps} interleaved rounds")
    print(f"after {args.warmup} warm-up rounds, order rotating each round\n")

    print("trainable parameters")
    counts = {name: count_parameters(m) for name, m in models.items()}
    for name, c in counts.items():
        parts = ", ".join(f"{k} {v / 1e6:.3f}M" for k, v in c.items() if k != "total")
        print(f"  {name:<{width(counts)}} {c['total'] / 1e6:8.3f}M  ({parts})")
    extra = counts["bayesncl"]["total"] / counts["ncl"]["total"] - 1
    print(f"  bayesncl has {extra:+.1%} parameters over ncl (the gating head)\n")

    loads = [os.getloadavg()[0]]
    first = first_steps(steps, device)
    print("first step of each (compiling happens here):")
    for name, seconds in first.items():
        print(f"  {name:<{width(steps)}} {seconds:7.2f} s")
    print()
    wall, cpu, peak = time_interleaved(steps, args.steps, args.warmup, device)
    loads.append(os.getloadavg()[0])
    report("wall-clock time per step", wall, peak if device.type == "cuda" else None)
    if device.type == "cpu":
        report("process CPU time per step (excludes waiting for a busy core)", cpu, None)
        cores = min(torch.get_num_threads(), os.cpu_count() or 1)
        limit, how = cpu_peak_gflops(cores)
        if args.peak_gflops:
            limit, how = args.peak_gflops, "--peak-gflops"
        report_flops(flops, wall, limit, how)
    else:
        report_flops(flops, wall, args.peak_gflops, "--peak-gflops" if args.peak_gflops else "")
    base = f"bayesncl ({variant_label(cfgs['bayesncl'], compiled['bayesncl'])})"
    for name in (n for n in steps if n.startswith("bayesncl ")):
        paired = [o / b for o, b in zip(wall[name], wall["bayesncl"], strict=True)]
        q1, med, q3 = quartiles(paired)
        print(f"{name} / {base}: paired per round: median {med:.3f}, IQR [{q1:.3f}, {q3:.3f}]")
    print()
    print(load_summary(loads))
    times = wall

    if args.breakdown:
        time_sections(steps, args.steps, device)
        ncl_step = statistics.median(times["ncl"])
        breakdown(models["bayesncl"], batch, device, args.precision, args.steps, ncl_step)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=64, help="images per view")
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument(
        "--proj", type=int, nargs=2, default=(2048, 256), metavar=("HIDDEN", "OUTPUT")
    )
    parser.add_argument("--steps", type=int, default=10, help="timed rounds")
    parser.add_argument("--warmup", type=int, default=3, help="untimed rounds first")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op threads on cpu (1: steadiest on a shared machine; 0: torch's default)",
    )
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--precision", choices=PRECISIONS, default="32")
    parser.add_argument("--backbone", default="resnet18", help="a solo-learn backbone name")
    parser.add_argument(
        "--small-stem", action="store_true", help="3x3 stride-1 stem, no max-pool (CIFAR)"
    )
    parser.add_argument("--images", choices=("random", "fashion-mnist"), default="random")
    parser.add_argument(
        "--breakdown", action="store_true", help="also time bayesncl's extra work alone"
    )
    parser.add_argument(
        "--compare-memory-format",
        action="store_true",
        help="also time bayesncl with the other memory format (channels-last vs contiguous)",
    )
    parser.add_argument(
        "--compile",
        action="store_true",
        help="performance.compile=True for every method (torch.compile of the backbone's "
        "training forward)",
    )
    parser.add_argument(
        "--compare-compile",
        action="store_true",
        help="also time bayesncl with the backbone's training forward compiled or not, the other "
        "of --compile",
    )
    parser.add_argument(
        "--compare-small-map-convs",
        action="store_true",
        help="also time bayesncl with its convolutions on small maps computed the other way "
        "(performance.small_map_convs: matrix products or convolutions)",
    )
    parser.add_argument(
        "--peak-gflops",
        type=float,
        default=0.0,
        help="the FLOP limit to report against (default on cpu: from /proc/cpuinfo)",
    )
    args = parser.parse_args(argv)
    for key in ("batch_size", "image_size", "steps"):
        if getattr(args, key) < 1:
            parser.error(f"--{key.replace('_', '-')} must be >= 1, got {getattr(args, key)}")
    if args.threads < 0:
        parser.error(f"--threads must be >= 0, got {args.threads}")
    if args.warmup < 0:
        parser.error(f"--warmup must be >= 0, got {args.warmup}")
    if min(args.proj) < 1:
        parser.error(f"--proj sizes must be >= 1, got {args.proj}")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is available; allowed here: cpu")
    if args.precision == "16" and args.device != "cuda":
        parser.error("--precision 16 needs --device cuda; on cpu use 32 or bf16")
    return args


def prepare_process(threads: int) -> None:
    """What every microbenchmark sets before it times anything: ``threads`` intra-op threads
    (0 keeps PyTorch's default) and no library warnings or notices between the figures (solo-learn's
    scheduler_interval notice, Lightning's and timm's deprecations, DALI's and the loaders' hints).
    """
    if threads > 0:
        torch.set_num_threads(threads)
    for category in (FutureWarning, DeprecationWarning, UserWarning):
        warnings.filterwarnings("ignore", category=category)
    logging.getLogger().setLevel(logging.ERROR)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    prepare_process(args.threads)
    import solo_bayesncl  # noqa: F401  (registers bayesncl and ncl with solo-learn)

    run(args)


if __name__ == "__main__":
    main()
