"""Image-folder pretraining on the CPU: DALI's CPU pipeline against solo-learn's PIL path, in one
run, on the same folder and settings.

Settings are the ``cpu`` benchmark preset's (``solo_bayesncl/benchmark/presets/cpu.yaml``: 2 x 256
views at 32 px with the CIFAR recipe, ResNet-18 with the ImageNet stem, bayesncl by default),
with the data replaced by an image folder: ``--images`` Fashion-MNIST training images written as
``--ext`` files (JPEG by default) of ``--size`` px in 10 class folders (or ``--folder``, any
image folder). Both loaders are the ones training uses:

- ``pil/wN``: solo-learn's loader for ``data.format=image_folder``: its ``ImageFolder`` dataset,
  PIL decoding and ``build_transform_pipeline`` per image and view, ``N`` loader workers (0: in
  the training process).
- ``dali/tN``: ``data.format=dali`` with ``dali.device=cpu``: solo-learn's DALI pipeline
  (``PretrainPipelineBuilder``, ``build_transform_pipeline_dali``) through the plugin's data
  module, ``N`` DALI threads (``data.num_workers``), in the training process.

Two measurements, each in rounds with the order rotating (load from other processes falls on all
variants alike):

1. Loader alone: batches as fast as the loader gives them; images/s and process CPU time per
   batch (DALI's threads are in the process; PIL workers' CPU is added once they exit).
2. Full step: the method's ``training_step``, backward and LARS step (as in
   ``bench_train_step.py``) on each loader's batches, and ``model`` on one fixed batch; pipeline
   efficiency = model step / full step.

A PIL turn starts a fresh loader iterator (workers start, as at every epoch); DALI's pipeline
lives across epochs, so a DALI turn continues its iterator. DALI prepares up to two batches ahead
in its own threads: a turn's CPU time is read once those threads are idle again, so that work is
charged to DALI's turn, and ``--warmup`` (2 by default) consumes the batches prepared before it. Process CPU time is reported beside
wall time, with the machine's load average: on a busy machine wall times are inflated, CPU times
much less.

Usage::

    python microbenchmarks/bench_dali.py [--method bayesncl] [--images 2560] [--size 32]
        [--ext jpg|png] [--folder PATH] [--loaders pil/w0 pil/w2 dali/t1 dali/t2]
        [--rounds 3] [--steps 4] [--warmup 2] [--threads 0] [--no-model]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_train_step import (  # noqa: E402
    build_model,
    load_summary,
    make_step,
    prepare_process,
    quartiles,
)

DEFAULT_LOADERS = ("pil/w0", "pil/w2", "dali/t1", "dali/t2")
TARGET_EFFICIENCY = 0.85
_PRESET_DATA_KEYS = ("data.dataset", "data.fraction", "data.val_fraction", "data.num_workers")


def write_folder(root: Path, count: int, size: int, ext: str) -> Path:
    """``count`` Fashion-MNIST training images as RGB ``ext`` files in ``root/<class>/``."""
    from PIL import Image

    from solo_bayesncl.data.fashion_mnist import FashionMNIST

    data = FashionMNIST("train")
    if count > len(data):
        raise SystemExit(f"--images {count}: Fashion-MNIST has {len(data)} training images")
    for i in range(count):
        image = Image.fromarray(data.images[i], mode="L").convert("RGB")
        image = image.resize((size, size), Image.BICUBIC)
        folder = root / f"class{int(data.targets[i])}"
        folder.mkdir(parents=True, exist_ok=True)
        image.save(folder / f"{i:06d}.{ext}", quality=95) if ext == "jpg" else image.save(
            folder / f"{i:06d}.{ext}"
        )
    return root


def build_cfg(args: argparse.Namespace, folder: Path):
    """The preset's config for ``args.method`` on the image folder, checked like a real run."""
    from hydra import compose, initialize_config_dir

    from solo_bayesncl.benchmark.presets import load_preset
    from solo_bayesncl.training.pretrain import prepare_pretrain

    preset = load_preset("cpu")
    overrides = [o for o in preset.overrides if not o.lstrip("+").startswith(_PRESET_DATA_KEYS)] + [
        *preset.method_overrides.get(args.method, []),
        "data.dataset=custom",
        f"data.train_path={folder}",
        "data.val_path=null",
        "interpretability.enabled=False",
        "wandb.enabled=False",
        "accelerator=cpu",
    ]
    with initialize_config_dir(config_dir=str(preset.config_dir), version_base="1.2"):
        cfg = compose(config_name=f"{args.method}.yaml", overrides=overrides)
    return prepare_pretrain(cfg).solo


class Loader:
    """One loader variant: ``pil/wN`` or ``dali/tN``, as training builds it."""

    def __init__(self, cfg, name: str) -> None:
        from omegaconf import OmegaConf

        kind, _, count = name.partition("/")
        self.name, self.kind = name, kind
        cfg = OmegaConf.create(OmegaConf.to_container(cfg))  # own copy
        cfg.data.num_workers = int(count[1:])
        if kind == "pil":
            from solo_bayesncl.data.names import dataset_spec
            from solo_bayesncl.data.pipelines import per_image_datamodule

            cfg.data.format = "image_folder"
            batch = int(cfg.optimizer.batch_size)
            module = per_image_datamodule(dataset_spec(cfg), cfg, 0, batch)
            self.loader = module.train_dataloader()
            self._iterator: Iterator | None = None
        else:
            from solo_bayesncl.data.dali_modules import build_pretrain_dali_datamodule
            from solo_bayesncl.data.names import dataset_spec
            from solo_bayesncl.data.resolve import resolve_dali_cfg

            cfg.data.format = "dali"
            OmegaConf.update(cfg, "dali.device", "cpu", force_add=True)
            resolve_dali_cfg(cfg)
            module = build_pretrain_dali_datamodule(
                dataset_spec(cfg), int(cfg.optimizer.batch_size), cfg
            )
            module.trainer = SimpleNamespace(local_rank=0, global_rank=0, world_size=1)
            module.setup("fit")
            self.loader = module.train_dataloader()
            self._iterator = iter(self.loader)

    def batches(self) -> Iterator[list]:
        """PIL: a fresh iterator (workers start as at every epoch). DALI: its running pipeline,
        into the next epoch when one ends."""
        if self.kind == "pil":
            yield from self.loader
            return
        while True:
            try:
                yield next(self._iterator)
            except StopIteration:
                self._iterator = iter(self.loader)


def _copy(batch):
    if isinstance(batch, torch.Tensor):
        return batch.clone()
    return [_copy(b) for b in batch]


def settle(quiet: float = 0.003, samples: int = 3, timeout: float = 20.0) -> None:
    """Waits until this process's background threads (DALI's prefetching) are idle: ``samples``
    successive 0.1 s windows with less than ``quiet`` s of process CPU time each."""
    calm, last, end = 0, time.process_time(), time.perf_counter() + timeout
    while calm < samples and time.perf_counter() < end:
        time.sleep(0.1)
        now = time.process_time()
        calm = calm + 1 if now - last < quiet else 0
        last = now


def run_turn(
    source: Iterator[list] | None,
    step: Callable[[list], torch.Tensor] | None,
    fixed: list | None,
    warmup: int,
    steps: int,
) -> tuple[list[float], float, float]:
    """``warmup`` + ``steps`` batches (and steps); returns the timed ones' wall times and the whole
    turn's wall and CPU time (this process, plus loader workers once they exit)."""
    children = os.times()
    start_cpu, start = time.process_time(), time.perf_counter()
    walls = []
    for i in range(warmup + steps):
        t0 = time.perf_counter()
        batch = next(source) if source is not None else fixed
        if step is not None:
            loss = step(batch)
            if not torch.isfinite(loss).all():
                raise FloatingPointError(f"non-finite loss at step {i}")
        if i >= warmup:
            walls.append(time.perf_counter() - t0)
    if source is not None:
        source.close()  # PIL: shuts the workers down, so their CPU time is counted below
    wall = time.perf_counter() - start
    settle()  # DALI keeps preparing batches ahead: counted here, not in the next turn
    after = os.times()
    workers = (after.children_user - children.children_user) + (
        after.children_system - children.children_system
    )
    return walls, wall, time.process_time() - start_cpu + workers


def measure(
    names: list[str],
    turn: Callable[[str], tuple[list[float], float, float]],
    rounds: int,
    steps_per_turn: int,
    title: str,
) -> dict[str, dict]:
    """Runs every variant once per round, the order rotating; returns per-variant timings."""
    out = {n: {"walls": [], "rounds": [], "wall": 0.0, "cpu": 0.0, "n": 0} for n in names}
    print(f"\n{title}")
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            load = os.getloadavg()[0]
            walls, wall, cpu = turn(name)
            entry = out[name]
            entry["walls"] += walls
            entry["rounds"].append(statistics.median(walls))
            entry["wall"] += wall
            entry["cpu"] += cpu
            entry["n"] += steps_per_turn
            entry.setdefault("loads", []).append(load)
            print(
                f"  round {r + 1} {name:<8} median {statistics.median(walls):6.3f} s/batch "
                f"(load {load:.1f})",
                flush=True,
            )
    return out


def table(results: dict[str, dict], bs: int, model: dict | None) -> None:
    head = f"{'variant':<9} {'median s':>9} {'q1 s':>7} {'q3 s':>7} {'img/s':>7}"
    head += f" {'CPU s/batch':>12} {'CPU/wall':>9} {'CPU img/s':>10}"
    if model is not None:
        head += f" {'eff.':>6} {'paired eff. [IQR]':>22} {'CPU eff.':>9}"
    print(head)
    for name, r in results.items():
        q1, med, q3 = quartiles(r["walls"])
        cpu = r["cpu"] / r["n"]
        line = (
            f"{name:<9} {med:9.3f} {q1:7.3f} {q3:7.3f} {bs / med:7.1f} {cpu:12.3f} "
            f"{r['cpu'] / r['wall']:9.2f} {bs / cpu:10.1f}"
        )
        if model is not None:
            base = statistics.median(model["walls"])
            ratios = [m / v for m, v in zip(model["rounds"], r["rounds"], strict=True)]
            p1, pm, p3 = quartiles(ratios)
            line += f" {base / med:6.3f} {f'{pm:.3f} [{p1:.3f}, {p3:.3f}]':>22}"
            line += f" {(model['cpu'] / model['n']) / cpu:9.3f}"
        print(line)


def compare(results: dict[str, dict], label: str) -> None:
    """Paired speed-up of every DALI variant over every PIL variant (per-round ratios)."""
    for d in (n for n in results if n.startswith("dali")):
        for p in (n for n in results if n.startswith("pil")):
            ratios = [
                x / y for x, y in zip(results[p]["rounds"], results[d]["rounds"], strict=True)
            ]
            q1, med, q3 = quartiles(ratios)
            cpu = (results[p]["cpu"] / results[p]["n"]) / (results[d]["cpu"] / results[d]["n"])
            print(
                f"{label}: {d} over {p}: wall {med:.2f}x [{q1:.2f}, {q3:.2f}], "
                f"CPU time {cpu:.2f}x less"
            )


def run(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-dali-") as tmp:
        if args.folder is None:
            folder = write_folder(Path(tmp) / "train", args.images, args.size, args.ext)
            what = f"{args.images} Fashion-MNIST images as {args.size} px {args.ext.upper()}"
        else:
            folder = Path(args.folder)
            what = str(folder)
        cfg = build_cfg(args, folder)
        loaders = {name: Loader(cfg, name) for name in args.loaders}
        bs = int(cfg.optimizer.batch_size)
        import nvidia.dali

        print(
            f"torch {torch.__version__} ({torch.get_num_threads()} intra-op threads), DALI "
            f"{nvidia.dali.__version__}, {os.cpu_count()} logical CPUs"
        )
        views = [aug.crop_size for aug in cfg.augmentations for _ in range(aug.num_crops)]
        print(
            f"preset cpu settings on an image folder ({what}): {cfg.method}, "
            f"{cfg.backbone.name}, {bs} images x {len(views)} views of {views[0]} px per batch"
        )
        print(
            f"{args.rounds} rounds, warm-up {args.warmup} + {args.steps} timed batches per turn, "
            "order rotating each round"
        )
        per_turn = args.warmup + args.steps

        def load_turn(name):
            return run_turn(loaders[name].batches(), None, None, args.warmup, args.steps)

        alone = measure(list(loaders), load_turn, args.rounds, per_turn, "1. loader alone")
        loads = [x for r in alone.values() for x in r["loads"]]
        full = None
        if not args.no_model:
            model = build_model(cfg, torch.device("cpu"))
            source = loaders[args.loaders[0]].batches()
            first = _copy(next(source))  # DALI reuses its buffers
            source.close()
            holder: list = list(first)
            base = make_step(model, holder, torch.device("cpu"), "32")

            def feed(batch: list) -> torch.Tensor:
                holder[:] = batch
                return base()

            def full_turn(name):
                source = None if name == "model" else loaders[name].batches()
                return run_turn(source, feed, first, args.warmup, args.steps)

            names = ["model", *loaders]
            full = measure(names, full_turn, args.rounds, per_turn, "2. full training step")
            loads += [x for r in full.values() for x in r["loads"]]

        print("\n1. loader alone (images/s: images per second of wall / of process CPU time)")
        table(alone, bs, None)
        compare(alone, "loader alone")
        if full is not None:
            print(
                "\n2. full training step (eff. = model step / full step in wall time; CPU eff. = "
                "the same in process CPU time, which a busy machine inflates much less)"
            )
            model_result = full.pop("model")
            table({"model": model_result, **full}, bs, model_result)
            compare(full, "full step")
            best = min(full, key=lambda n: statistics.median(full[n]["walls"]))
            value = statistics.median(model_result["walls"]) / statistics.median(
                full[best]["walls"]
            )
            word = "meets" if value >= TARGET_EFFICIENCY else "misses"
            print(
                f"best loader in wall time: {best}, pipeline efficiency {value:.3f}: {word} the "
                f"target >= {TARGET_EFFICIENCY}"
            )
            for name, r in full.items():
                value = (model_result["cpu"] / model_result["n"]) / (r["cpu"] / r["n"])
                word = "meets" if value >= TARGET_EFFICIENCY else "misses"
                print(f"{name}: CPU-time efficiency {value:.3f}: {word} the target")
        print(load_summary(loads))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--method", default="bayesncl")
    parser.add_argument("--images", type=int, default=2560, help="images written to the folder")
    parser.add_argument("--size", type=int, default=32, help="side of the written images, px")
    parser.add_argument("--ext", choices=("jpg", "png"), default="jpg")
    parser.add_argument("--folder", help="an existing image folder (class sub-folders) instead")
    parser.add_argument("--loaders", nargs="+", default=list(DEFAULT_LOADERS))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=4, help="timed batches per turn")
    parser.add_argument("--warmup", type=int, default=2, help="untimed batches per turn")
    parser.add_argument(
        "--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)"
    )
    parser.add_argument("--no-model", action="store_true", help="time the loaders alone")
    args = parser.parse_args(argv)
    for key in ("rounds", "steps", "images", "size"):
        if getattr(args, key) < 1:
            parser.error(f"--{key} must be >= 1, got {getattr(args, key)}")
    if args.warmup < 0 or args.threads < 0:
        parser.error("--warmup and --threads must be >= 0")
    for name in args.loaders:
        kind, _, count = name.partition("/")
        prefix = {"pil": "w", "dali": "t"}.get(kind)
        if prefix is None or not count.startswith(prefix) or not count[1:].isdigit():
            parser.error(f"--loaders: {name!r} is not pil/wN (N workers) or dali/tN (N threads)")
        if kind == "dali" and int(count[1:]) < 1:
            parser.error(f"--loaders: {name!r}: DALI needs at least one thread")
    if args.folder is not None and not Path(args.folder).is_dir():
        parser.error(f"--folder {args.folder!r} is not a folder")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    prepare_process(args.threads)
    run(args)


if __name__ == "__main__":
    main()
