"""Pipeline efficiency of pretraining: the model's own step against a full step through the real
data pipeline, for solo-learn's per-image loader and for the batched in-memory path, in one run.

Settings are the ``cpu`` benchmark preset's (``solo_bayesncl/benchmark/presets/cpu.yaml``:
Fashion-MNIST, 5,000 training images, 2 x 256 views at 32 px, ResNet-18 with the ImageNet stem)
for one method (bayesncl by default), its config composed from the preset's config folder and
checked by :func:`solo_bayesncl.training.pretrain.prepare_pretrain`. One model and optimizer serve
every variant (set up as :mod:`microbenchmarks.bench_train_step` sets them up: the method's own
``training_step``, backward and LARS step).

Variants (``--variants``):

- ``model``: the step alone on one fixed, already augmented batch (no data loading).
- ``per_image/wN``: solo-learn's path as training runs it (``data.augment_on=per_image``): its
  data loader with ``N`` workers applying ``build_transform_pipeline`` to one PIL image at a time.
- ``batch/wN``: the batched path (``data.augment_on=batch``): the loader indexes the uint8 tensor
  (``N`` workers; training uses 0), the batch goes to the device and the data module's
  ``on_after_batch_transfer`` augments it there, as the Trainer calls it.

A full step is the time from asking the loader for a batch to the end of the optimizer step.
Variants run in turns, the order rotating each round (so load from other processes falls on all
of them alike); each turn starts a fresh loader iterator (as every epoch does), runs
``--warmup`` untimed steps and then ``--steps`` timed ones. Reported per variant: median and IQR
of the wall time per step, images/s (``batch_size / step``, each image giving two views),
pipeline efficiency (model step / full step: ratio of medians, and the median of the per-round
paired ratios), and process CPU time per step over whole turns with the loader workers' CPU
included (the machine's load inflates wall times, much less CPU times). The 1-minute load
average is printed at every turn; the Lightning loop's own per-step overhead is not included.

Usage::

    python microbenchmarks/bench_pipeline.py [--method bayesncl] [--rounds 3] [--steps 5]
        [--warmup 2] [--threads 0] [--variants model per_image/w2 batch/w0 ...]
        [--device cpu|cuda] [--preset cpu]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_train_step import (  # noqa: E402
    build_model,
    load_summary,
    make_step,
    prepare_process,
    quartiles,
    synchronize,
)

DEFAULT_VARIANTS = ("model", "per_image/w2", "per_image/w0", "batch/w0", "batch/w2")
TARGET_EFFICIENCY = 0.85


def build_cfg(args: argparse.Namespace):
    """The preset's config for ``args.method``, checked like a real run (``data.augment_on`` and
    ``data.num_workers`` are set per variant later)."""
    from hydra import compose, initialize_config_dir

    from solo_bayesncl.benchmark.presets import load_preset
    from solo_bayesncl.training.pretrain import prepare_pretrain

    preset = load_preset(args.preset)
    overrides = [
        *preset.overrides,
        *preset.method_overrides.get(args.method, []),
        "interpretability.enabled=False",
        "wandb.enabled=False",
        f"accelerator={'gpu' if args.device == 'cuda' else 'cpu'}",
    ]
    with initialize_config_dir(config_dir=str(preset.config_dir), version_base="1.2"):
        cfg = compose(config_name=f"{args.method}.yaml", overrides=overrides)
    return prepare_pretrain(cfg).solo


def _to(batch: list, device: torch.device) -> list:
    """The batch on ``device`` (Lightning's default transfer, non-blocking from pinned memory)."""
    moved = []
    for item in batch:
        if isinstance(item, list):
            moved.append([x.to(device, non_blocking=True) for x in item])
        else:
            moved.append(item.to(device, non_blocking=True))
    return moved


class LoaderVariant:
    """One pipeline: a loader and what happens to a batch between the loader and the step."""

    def __init__(self, cfg, kind: str, workers: int, device: torch.device) -> None:
        from omegaconf import OmegaConf

        from solo_bayesncl.data.names import dataset_spec
        from solo_bayesncl.data.pipelines import batch_datamodule, per_image_datamodule

        cfg = OmegaConf.create(OmegaConf.to_container(cfg))  # own copy
        cfg.data.num_workers = workers
        cfg.data.augment_on = kind
        self.device = device
        data, batch = dataset_spec(cfg), int(cfg.optimizer.batch_size)
        if kind == "batch":
            self.datamodule = batch_datamodule(data, cfg, 0, batch, num_workers=workers)
            self.loader = self.datamodule.train_dataloader()
            self.after_transfer: Callable[[list], list] = lambda b: (
                self.datamodule.on_after_batch_transfer(b, 0)
            )
        else:
            self.loader = per_image_datamodule(data, cfg, 0, batch).train_dataloader()
            self.after_transfer = lambda b: b

    def batches(self) -> Iterator[list]:
        for batch in self.loader:
            yield self.after_transfer(_to(batch, self.device))


def fixed_batch(cfg, device: torch.device) -> list:
    """One augmented batch of the batched path, reused by the ``model`` variant."""
    return next(LoaderVariant(cfg, "batch", 0, device).batches())


def run_turn(
    step: Callable[[list], torch.Tensor],
    batches: Iterator[list] | None,
    batch: list | None,
    warmup: int,
    steps: int,
    device: torch.device,
) -> tuple[list[float], float, float]:
    """``warmup`` + ``steps`` steps; returns the timed steps' wall times, and the whole turn's
    wall time and CPU time (this process plus the loader workers, counted once they exit)."""
    children = os.times()
    start_cpu, start = time.process_time(), time.perf_counter()
    walls = []
    for i in range(warmup + steps):
        synchronize(device)
        t0 = time.perf_counter()
        current = next(batches) if batches is not None else batch
        loss = step(current)
        synchronize(device)
        if not torch.isfinite(loss).all():
            raise FloatingPointError(f"non-finite loss at step {i}")
        if i >= warmup:
            walls.append(time.perf_counter() - t0)
    if batches is not None:
        batches.close()  # shuts the loader's workers down, so their CPU time is counted below
    wall = time.perf_counter() - start
    after = os.times()
    workers = (after.children_user - children.children_user) + (
        after.children_system - children.children_system
    )
    return walls, wall, time.process_time() - start_cpu + workers


def run(args: argparse.Namespace) -> None:
    device = torch.device(args.device)
    cfg = build_cfg(args)
    model = build_model(cfg, device)
    batch = fixed_batch(cfg, device)
    # make_step closes over one batch object: every variant refills it in place with its own
    holder: list = list(batch)
    base = make_step(model, holder, device, "32")

    def feed(b: list) -> torch.Tensor:
        holder[:] = b
        return base()

    variants: dict[str, LoaderVariant | None] = {}
    for name in args.variants:
        kind, _, workers = name.partition("/w")
        variants[name] = None if name == "model" else LoaderVariant(cfg, kind, int(workers), device)

    bs = int(cfg.optimizer.batch_size)
    threads = f", {torch.get_num_threads()} intra-op threads" if device.type == "cpu" else ""
    print(
        f"torch {torch.__version__}, kornia {_version('kornia')}, device {device}{threads}, "
        f"{os.cpu_count()} logical CPUs"
    )
    images = len(LoaderVariant(cfg, "batch", 0, device).loader.dataset)
    print(
        f"preset {args.preset}: {cfg.method}, {cfg.backbone.name}, {bs} images x "
        f"{len(batch[1])} views of {batch[1][0].shape[-1]}px per step, {images} training images"
    )
    print(
        f"{args.rounds} rounds x (warm-up {args.warmup} + {args.steps} timed steps) per "
        "variant, fresh loader iterator per turn, order rotating each round\n"
    )

    names = list(variants)
    walls: dict[str, list[float]] = {n: [] for n in names}
    per_round: dict[str, list[float]] = {n: [] for n in names}
    turn_wall: dict[str, float] = dict.fromkeys(names, 0.0)
    turn_cpu: dict[str, float] = dict.fromkeys(names, 0.0)
    turn_steps: dict[str, int] = dict.fromkeys(names, 0)
    loads: list[float] = []
    for r in range(args.rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            loads.append(os.getloadavg()[0])
            source = variants[name]
            batches = source.batches() if source is not None else None
            times, wall, cpu = run_turn(feed, batches, batch, args.warmup, args.steps, device)
            walls[name].extend(times)
            per_round[name].append(statistics.median(times))
            turn_wall[name] += wall
            turn_cpu[name] += cpu
            turn_steps[name] += args.warmup + args.steps
            print(
                f"  round {r + 1} {name:<13} median {statistics.median(times):6.3f} s/step "
                f"(load {loads[-1]:.1f})",
                flush=True,
            )
    report(args, bs, walls, per_round, turn_wall, turn_cpu, turn_steps, loads)


def _version(module: str) -> str:
    try:
        return __import__(module).__version__
    except ImportError:
        return "not installed"


def report(args, bs, walls, per_round, turn_wall, turn_cpu, turn_steps, loads) -> None:
    model = statistics.median(walls["model"]) if "model" in walls else None
    print(
        f"\n{'variant':<13} {'median s':>9} {'q1 s':>7} {'q3 s':>7} {'img/s':>7} "
        f"{'eff.':>6} {'paired eff. [IQR]':>22} {'CPU s/step':>11} {'CPU/wall':>9}"
    )
    for name, t in walls.items():
        q1, med, q3 = quartiles(t)
        eff = paired = ""
        if model is not None:
            eff = f"{model / med:6.3f}"
            ratios = [m / v for m, v in zip(per_round["model"], per_round[name], strict=True)]
            p1, pm, p3 = quartiles(ratios)
            paired = f"{pm:.3f} [{p1:.3f}, {p3:.3f}]"
        cpu = turn_cpu[name] / turn_steps[name]
        share = turn_cpu[name] / turn_wall[name]
        print(
            f"{name:<13} {med:9.3f} {q1:7.3f} {q3:7.3f} {bs / med:7.1f} {eff:>6} {paired:>22} "
            f"{cpu:11.3f} {share:9.2f}"
        )
    print(
        "\neff. = model step / full step (ratio of medians; paired: median over rounds of the "
        "per-round ratio); CPU s/step: process CPU time over whole turns (warm-up and loader "
        "start included), loader workers included; CPU/wall > 1 means more than one core busy"
    )
    pairs = [
        (b, p) for b in walls if b.startswith("batch") for p in walls if p.startswith("per_image")
    ]
    for b, p in pairs:
        ratios = [x / y for x, y in zip(per_round[p], per_round[b], strict=True)]
        q1, med, q3 = quartiles(ratios)
        print(f"speed-up {b} over {p}: paired median {med:.2f}x [{q1:.2f}, {q3:.2f}]")
    if model is not None:
        best = max(
            (n for n in walls if n != "model"), key=lambda n: model / statistics.median(walls[n])
        )
        value = model / statistics.median(walls[best])
        word = "meets" if value >= TARGET_EFFICIENCY else "misses"
        print(
            f"best pipeline: {best}, efficiency {value:.3f}: {word} the target >= {TARGET_EFFICIENCY}"
        )
    print(load_summary(loads))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="cpu", help="benchmark preset name or YAML path")
    parser.add_argument("--method", default="bayesncl")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=5, help="timed steps per turn")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps per turn")
    parser.add_argument(
        "--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)"
    )
    parser.add_argument("--variants", nargs="+", default=list(DEFAULT_VARIANTS))
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    args = parser.parse_args(argv)
    for key in ("rounds", "steps"):
        if getattr(args, key) < 1:
            parser.error(f"--{key} must be >= 1, got {getattr(args, key)}")
    if args.warmup < 0 or args.threads < 0:
        parser.error("--warmup and --threads must be >= 0")
    for name in args.variants:
        kind, _, workers = name.partition("/w")
        if name != "model" and (kind not in ("batch", "per_image") or not workers.isdigit()):
            parser.error(
                f"--variants: {name!r} is not one of model, per_image/wN, batch/wN (N workers)"
            )
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is available; allowed here: cpu")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    prepare_process(args.threads)
    run(args)


if __name__ == "__main__":
    main()
