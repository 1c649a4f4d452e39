"""The Lightning callbacks a benchmark run adds to its fits: epoch timing, per-epoch seeding,
the log of sittings (to stitch a resumed run's metrics together) and progress for the display.

Imported only by the run process (:mod:`solo_bayesncl.benchmark.run_one`), never by the benchmark
process, which does not load Lightning.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import numpy as np
import torch
from lightning.pytorch import Callback

from solo_bayesncl.benchmark.machine import cpu_seconds
from solo_bayesncl.benchmark.progress import StatusFile
from solo_bayesncl.core.distributed import rank_seed
from solo_bayesncl.io.files import write_text_replacing
from solo_bayesncl.training.trainer import csv_log_dir

__all__ = ["AttemptLog", "EpochSeeder", "EpochTimer", "Progress", "stage_callbacks"]


class EpochTimer(Callback):
    """Wall and CPU seconds of every training epoch in ``<stage>_epoch_times.json``, keyed by
    epoch (kept across resumes; an epoch run again replaces its earlier figure)."""

    def __init__(self, run_dir: Path, stage: str) -> None:
        self.path = run_dir / f"{stage}_epoch_times.json"
        self._start: tuple[int, float, float] | None = None

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self._start = (trainer.current_epoch, time.perf_counter(), cpu_seconds())

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        # a resumed fit calls this hook again for the checkpoint's epoch without a start
        if self._start is None or self._start[0] != trainer.current_epoch:
            return
        epoch, wall, cpu = self._start
        times = json.loads(self.path.read_text()) if self.path.is_file() else {}
        times[str(epoch)] = {
            "wall_s": time.perf_counter() - wall,
            "cpu_s": cpu_seconds() - cpu,
        }
        write_text_replacing(self.path, json.dumps(times, indent=2, default=float) + "\n")
        self._start = None


class EpochSeeder(Callback):
    """Seeds Python, NumPy and torch from (seed, epoch, rank) when an epoch starts, so that
    an epoch's randomness does not depend on whether the run was resumed before it. The
    global rank keeps the processes of a multi-process run on streams of their own (the
    batched augmentation draws from torch's global generator); rank 0's is the one-process
    stream."""

    def __init__(self, seed: int) -> None:
        self.seed = seed

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        epoch_seed = rank_seed(self.seed * 1_000_003 + trainer.current_epoch, trainer.global_rank)
        random.seed(epoch_seed)
        np.random.seed(epoch_seed)
        torch.manual_seed(epoch_seed)


class AttemptLog(Callback):
    """Appends this sitting's log folder and the checkpoint it resumed from to
    ``<stage>_attempts.jsonl``, to stitch the metrics of resumed runs together."""

    def __init__(self, run_dir: Path, stage: str) -> None:
        self.path = run_dir / f"{stage}_attempts.jsonl"

    def on_train_start(self, trainer, pl_module) -> None:
        entry = {
            "folder": str(csv_log_dir(trainer)),
            "resumed_from": str(trainer.ckpt_path) if trainer.ckpt_path else None,
            "start_epoch": int(trainer.current_epoch),
            "start_step": int(trainer.global_step),
        }
        with open(self.path, "a") as f:
            f.write(json.dumps(entry) + "\n")


class Progress(Callback):
    """Epoch and batch of the fit in ``status.json``."""

    def __init__(self, status: StatusFile, stage: str) -> None:
        self.status, self.stage = status, stage

    def _write(self, trainer, batch: int, force: bool) -> None:
        batches = trainer.num_training_batches
        self.status.update(
            force=force,
            stage=self.stage,
            epoch=int(trainer.current_epoch),
            epochs=int(trainer.max_epochs),
            batch=batch,
            batches=int(batches) if batches != float("inf") else None,
        )

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self._write(trainer, 0, force=True)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self._write(trainer, batch_idx + 1, force=False)


def stage_callbacks(
    run_dir: Path, seed: int, status: StatusFile | None, stage: str
) -> list[Callback]:
    """The callbacks of a stage's fit: pretraining resumes, so it seeds every epoch and logs its
    sittings; linear evaluation restarts from scratch when interrupted. ``status`` is None in
    the processes of ranks 1.. of a pretraining, which only seed."""
    if stage == "pretrain" and status is None:  # a process of rank 1..: it records nothing
        return [EpochSeeder(seed)]
    if stage == "pretrain":
        return [
            EpochSeeder(seed),
            EpochTimer(run_dir, stage),
            Progress(status, stage),
            AttemptLog(run_dir, stage),
        ]
    return [EpochTimer(run_dir, stage), Progress(status, stage)]
