"""The Lightning callbacks a benchmark run adds to its fits: epoch timing, the log of sittings
(to stitch a resumed run's metrics together) and progress for the display. Imported only by the
run process (:mod:`solo_bayesncl.benchmark.run_one`): the benchmark process loads no Lightning.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from lightning.pytorch import Callback

from solo_bayesncl.benchmark.machine import cpu_seconds
from solo_bayesncl.benchmark.progress import StatusFile
from solo_bayesncl.benchmark.sittings import metrics_rows, per_epoch
from solo_bayesncl.io.files import write_text_replacing
from solo_bayesncl.training.auto_resume import ResumePoint, read_position
from solo_bayesncl.training.summary import csv_log_dir

__all__ = ["AttemptLog", "EpochTimer", "Progress", "resumed_at", "stage_callbacks"]


def resumed_at(trainer) -> ResumePoint | None:
    """Where the fit resumed (read from its checkpoint), None for a fit from the start."""
    return read_position(trainer.ckpt_path) if trainer.ckpt_path else None


class EpochTimer(Callback):
    """Wall and CPU seconds of every training epoch in ``<stage>_epoch_times.json`` (an epoch
    resumed part-way through: from the resume, with the ``share`` of its batches trained here)."""

    def __init__(self, run_dir: Path, stage: str) -> None:
        self.path = run_dir / f"{stage}_epoch_times.json"
        self._start: tuple[int, float, float, float] | None = None
        self._times: dict[str, dict[str, float]] | None = None
        self._resumed: ResumePoint | None = None

    def times(self) -> dict[str, dict[str, float]]:
        """Every timed epoch, earlier sittings' included (read once, then kept up to date)."""
        if self._times is None:
            self._times = json.loads(self.path.read_text()) if self.path.is_file() else {}
        return self._times

    def mean_wall_s(self) -> float | None:
        """Wall seconds per epoch over the timed epochs (:func:`per_epoch`), None before any."""
        return per_epoch(list(self.times().values()), "wall_s")

    def on_train_start(self, trainer, pl_module) -> None:
        self._resumed = resumed_at(trainer)

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        share, point, batches = 1.0, self._resumed, trainer.num_training_batches
        if point is not None and point.batch > 0 and point.epoch == trainer.current_epoch:
            share = max(batches - point.batch, 0) / batches if batches != float("inf") else 0.0
        self._start = (trainer.current_epoch, time.perf_counter(), cpu_seconds(), share)

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        # a resumed fit calls this hook again for the checkpoint's epoch without a start
        if self._start is None or self._start[0] != trainer.current_epoch:
            return
        epoch, wall, cpu, share = self._start
        if share <= 0:
            return  # nothing of it was trained here (or its length is unknown)
        times = self.times()
        times[str(epoch)] = {
            "wall_s": time.perf_counter() - wall,
            "cpu_s": cpu_seconds() - cpu,
            "share": share,
        }
        write_text_replacing(self.path, json.dumps(times, indent=2, default=float) + "\n")
        self._start = None


class AttemptLog(Callback):
    """Appends this sitting's log folder and resumed checkpoint to ``<stage>_attempts.jsonl``."""

    def __init__(self, run_dir: Path, stage: str) -> None:
        self.path = run_dir / f"{stage}_attempts.jsonl"

    def on_train_start(self, trainer, pl_module) -> None:
        folder = csv_log_dir(trainer)
        entry = {
            "folder": str(folder),
            "rows_before": metrics_rows(folder),  # a resumed run appends to its metrics.csv
            "resumed_from": str(trainer.ckpt_path) if trainer.ckpt_path else None,
            "start_epoch": int(trainer.current_epoch),
            "start_step": int(trainer.global_step),
        }
        with open(self.path, "a") as f:
            f.write(json.dumps(entry) + "\n")


class Progress(Callback):
    """Epoch and batch of the fit in ``status.json``, with the mean time of the stage's finished
    epochs and, for a resumed fit, where it resumed."""

    def __init__(self, status: StatusFile, stage: str, timer: EpochTimer) -> None:
        self.status, self.stage, self.timer = status, stage, timer
        self.resumed: dict[str, int] | None = None
        self._within: tuple[int, int] | None = None  # (epoch, batch) a resumed fit starts at

    def _write(self, trainer, batch: int, force: bool) -> None:
        batches = trainer.num_training_batches
        self.status.update(
            force=force,
            stage=self.stage,
            epoch=int(trainer.current_epoch),
            epochs=int(trainer.max_epochs),
            batch=batch,
            batches=int(batches) if batches != float("inf") else None,
            epoch_s=self.timer.mean_wall_s(),
            resumed=self.resumed,
        )

    def on_train_start(self, trainer, pl_module) -> None:
        point = resumed_at(trainer)
        if point is not None:
            self.resumed = {"epoch": point.epoch, "step": point.step}
            self._within = (point.epoch, point.batch)

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        # a fit resumed within an epoch starts at the batch its checkpoint had reached
        within = self._within is not None and self._within[0] == trainer.current_epoch
        self._write(trainer, self._within[1] if within else 0, force=True)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self._write(trainer, batch_idx + 1, force=False)


def stage_callbacks(run_dir: Path, status: StatusFile | None, stage: str) -> list[Callback]:
    """The callbacks of a stage's fit; ``status`` is None on ranks 1.., which record nothing."""
    if status is None:  # a process of rank 1..
        return []
    timer = EpochTimer(run_dir, stage)
    if stage == "pretrain":
        return [timer, Progress(status, stage, timer), AttemptLog(run_dir, stage)]
    return [timer, Progress(status, stage, timer)]
