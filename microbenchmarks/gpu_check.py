"""One command for a machine with a GPU: every CUDA figure of the micro-benchmarks, one summary.

Runs, one after the other, each with its own time limit (together under 10 minutes on one GPU):

- ``bench_train_step.py --device cuda`` at the CIFAR setting (ResNet-18 with the small stem,
  2 x 256 views at 32 px) in fp32, bf16 and fp16 mixed precision: bayesncl / ncl and
  bayesncl / simclr step ratios, peak memory; in fp16 also bayesncl with the backbone's training
  forward compiled (``performance.compile``) against eager, and the compiling first step;
- ``bench_pipeline.py --device cuda`` with the ``cpu`` preset's data: the batched augmentation
  path on the GPU (``batch/w0``) against solo-learn's per-image CIFAR-style loader
  (``per_image/w4``) and the model step alone, in images/s;
- ``bench_metrics.py --device cuda`` on 10,000 x 2,048 features with 100 classes: every metric
  against its loop reference, values compared to 1e-6.

Each command's output goes to ``OUT/<name>.txt``; ``OUT/summary.md`` lists every command with
its exit status and time and the lines that carry its figures. ``--dry-run`` runs the same
commands on the CPU at tiny sizes (seconds), so the script is tested without a GPU.

Usage::

    python microbenchmarks/gpu_check.py [--out gpu-check] [--dry-run]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
PRECISIONS = ("32", "bf16", "16")

#: Lines of a benchmark's output that carry its figures (copied into the summary).
KEY_MARKERS = (
    "torch ",
    "n=",
    "bayesncl/",
    "verdict",
    "wall-clock",
    "peak",
    "GFLOP",
    "model",
    "per_image",
    "batch/",
    "efficiency",
    "target",
    "whole set",
    "load average",
    "paired per round",
    "first step",
    "compiled",
)


@dataclass(frozen=True)
class Check:
    """One benchmark command: ``name`` (its output file), the script and its arguments, and the
    time limit in seconds."""

    name: str
    script: str
    args: tuple[str, ...]
    timeout: int


def checks(dry_run: bool, out: Path) -> list[Check]:
    """The commands of the check; with ``dry_run`` on the CPU at tiny sizes."""
    if dry_run:
        preset = out / "tiny_preset.yaml"
        preset.write_text(TINY_PRESET)
        step = ("--device", "cpu", "--batch-size", "4", "--steps", "1", "--warmup", "0")
        step += ("--proj", "32", "16")
        return [
            Check(
                "train_step_32",
                "bench_train_step.py",
                (*step, "--precision", "32", "--compare-compile"),
                300,
            ),
            Check(
                "pipeline",
                "bench_pipeline.py",
                ("--device", "cpu", "--preset", str(preset), "--rounds", "1", "--steps", "1")
                + ("--warmup", "0", "--variants", "model", "per_image/w0", "batch/w0"),
                300,
            ),
            Check(
                "metrics",
                "bench_metrics.py",
                ("--device", "cpu", "--n", "300", "--k", "64", "--classes", "5")
                + ("--loop-queries", "20", "--repeat", "1", "--batch-size", "128"),
                300,
            ),
        ]
    step = ("--device", "cuda", "--small-stem", "--batch-size", "256", "--steps", "20")
    compare = {"16": ("--compare-compile",)}  # fp16 mixed: the GPU configs' precision
    limits = {"32": 90, "bf16": 90, "16": 200}  # compiling for the GPU takes a minute or two
    return [
        *(
            Check(
                f"train_step_{p}",
                "bench_train_step.py",
                (*step, "--precision", p, *compare.get(p, ())),
                limits[p],
            )
            for p in PRECISIONS
        ),
        Check(
            "pipeline",
            "bench_pipeline.py",
            ("--device", "cuda", "--rounds", "3", "--steps", "5", "--warmup", "2")
            + ("--variants", "model", "per_image/w4", "batch/w0"),
            130,
        ),
        Check("metrics", "bench_metrics.py", ("--device", "cuda"), 90),
    ]


TINY_PRESET = """\
name: gpu-check-dry-run
config_dir: scripts/pretrain/cifar
methods: [bayesncl]
seeds: [0]
overrides:
  - data.dataset=fashion-mnist
  - data.fraction=0.005
  - data.val_fraction=0.01
  - data.num_workers=0
  - max_epochs=1
  - optimizer.batch_size=8
  - accelerator=cpu
out_dir: results/gpu-check-dry-run
"""


def key_lines(text: str) -> list[str]:
    """The lines of a benchmark's output that carry its figures."""
    return [line for line in text.splitlines() if any(m in line for m in KEY_MARKERS)]


def run_check(check: Check, out: Path) -> tuple[int, float]:
    """Runs one command, its output (stdout and stderr) to ``out/<name>.txt``; returns the exit
    status (124 when it ran past its limit) and the wall time."""
    command = [sys.executable, str(HERE / check.script), *check.args]
    start = time.perf_counter()
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=check.timeout, cwd=HERE.parent
        )
        code, text = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as error:
        code = 124
        text = (error.stdout or b"").decode() + f"\nstopped after {check.timeout} s\n"
    elapsed = time.perf_counter() - start
    (out / f"{check.name}.txt").write_text(f"$ {' '.join(command)}\n{text}")
    return code, elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="gpu-check", help="folder for the outputs and summary")
    parser.add_argument("--dry-run", action="store_true", help="the same commands on the CPU, tiny")
    args = parser.parse_args(argv)
    if not args.dry_run:
        import torch

        if not torch.cuda.is_available():
            parser.error("no CUDA device is available; use --dry-run to check the script on CPU")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    lines = [
        f"# GPU check{' (dry run on the CPU)' if args.dry_run else ''}",
        "",
        f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}",
        "",
    ]
    failed = 0
    summary = out / "summary.md"
    for check in checks(args.dry_run, out):
        code, elapsed = run_check(check, out)
        failed += code != 0
        status = "ok" if code == 0 else f"FAILED (exit {code})"
        print(f"{check.name}: {status} in {elapsed:.0f} s", flush=True)
        text = (out / f"{check.name}.txt").read_text()
        lines += [
            f"## {check.name}: {status}, {elapsed:.0f} s",
            "",
            "```",
            text.splitlines()[0],
            *key_lines(text),
            "```",
            "",
        ]
        summary.write_text("\n".join(lines))  # after every command: a stopped run keeps its part
    print(f"summary: {summary}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
