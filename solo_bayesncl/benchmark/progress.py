"""The benchmark's progress: the run process writes a small ``status.json``, the benchmark
process reads it and shows one progress display.

The display is a single tqdm bar over every epoch of every run (pretraining and linear epochs,
plus one step each for kNN and the report); its text names the current run's method, seed and
stage, the epoch within the stage, the run's elapsed time and an estimate of what is left. Each
run's log path is printed when the run starts.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm

from solo_bayesncl.io.files import write_text_replacing

__all__ = [
    "STAGES",
    "ProgressDisplay",
    "RunProgress",
    "StatusFile",
    "format_seconds",
    "read_status",
]

STAGES: tuple[str, ...] = ("pretrain", "linear", "knn", "report")


class StatusFile:
    """Writes ``{"stage", "epoch", "epochs", "batch", "batches", "time"}`` atomically."""

    def __init__(self, path: Path, min_interval: float = 0.5) -> None:
        self.path = path
        self.min_interval = min_interval
        self._last = 0.0

    def update(self, force: bool = True, **fields: Any) -> None:
        now = time.time()
        if not force and now - self._last < self.min_interval:
            return
        self._last = now
        write_text_replacing(self.path, json.dumps({**fields, "time": now}))


def read_status(path: Path) -> dict[str, Any]:
    """The last status written, ``{}`` when there is none (yet)."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


@dataclass
class RunProgress:
    """Where one run stands, in units of epochs (kNN and the report count one each)."""

    pretrain_epochs: int
    linear_epochs: int

    @property
    def total(self) -> int:
        return self.pretrain_epochs + self.linear_epochs + 2

    def done(self, status: dict[str, Any]) -> float:
        """Units finished according to ``status``."""
        stage = status.get("stage")
        if stage == "done":
            return float(self.total)
        if stage not in STAGES:
            return 0.0
        offsets = {
            "pretrain": 0,
            "linear": self.pretrain_epochs,
            "knn": self.pretrain_epochs + self.linear_epochs,
            "report": self.pretrain_epochs + self.linear_epochs + 1,
        }
        done = float(offsets[stage])
        if stage in ("pretrain", "linear"):
            epochs = self.pretrain_epochs if stage == "pretrain" else self.linear_epochs
            batches = status.get("batches") or 0
            fraction = status.get("batch", 0) / batches if batches else 0.0
            done += min(status.get("epoch", 0) + min(fraction, 1.0), epochs)
        return min(done, float(self.total))

    @staticmethod
    def describe(status: dict[str, Any]) -> str:
        """``pretrain epoch 3/6``, ``knn``, ``starting``."""
        stage = status.get("stage")
        if stage is None:
            return "starting"
        if stage in ("pretrain", "linear") and status.get("epochs"):
            return f"{stage} epoch {min(status.get('epoch', 0) + 1, status['epochs'])}/{status['epochs']}"
        return str(stage)


def format_seconds(seconds: float | None) -> str:
    """``1:02:03``, ``4:05``; ``?`` for unknown."""
    if seconds is None:
        return "?"
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class ProgressDisplay:
    """One tqdm bar for the whole benchmark; its text is about the run in progress."""

    def __init__(self, total: int, initial: float = 0.0, file=None) -> None:
        tqdm.monitor_interval = 0  # no monitor thread in the process that starts the runs
        self.bar = tqdm(
            total=total,
            initial=initial,
            unit="epoch",
            file=file,
            dynamic_ncols=True,
            bar_format="{desc} |{bar}| {percentage:3.0f}% all runs [{elapsed}<{remaining}]",
        )
        stream = self.bar.fp
        # a terminal redraws in place; a log file (CI, nohup) gets a line every 30 s
        self._interval = 0.5 if getattr(stream, "isatty", lambda: False)() else 30.0
        self._drawn = 0.0
        self._base = initial
        self._label = ""
        self._run: RunProgress | None = None
        self._run_start = 0.0
        self._first_done: float | None = None

    def write(self, line: str) -> None:
        self.bar.write(line)

    def start_run(self, label: str, run: RunProgress) -> None:
        self._label, self._run = label, run
        self._run_start = time.perf_counter()
        self._first_done = None
        self.update({})

    def update(self, status: dict[str, Any]) -> None:
        """Shows ``status`` of the run in progress (method, seed, stage, epoch, times)."""
        if self._run is None:
            return
        done = self._run.done(status)
        if status and self._first_done is None:
            self._first_done = done  # what earlier sittings of this run had already finished
        elapsed = time.perf_counter() - self._run_start
        progressed = done - (self._first_done or 0.0)
        left = None
        if progressed > 0:
            left = elapsed / progressed * (self._run.total - done)
        self.bar.set_description_str(
            f"{self._label} | {RunProgress.describe(status)} | "
            f"{format_seconds(elapsed)} elapsed, ~{format_seconds(left)} left",
            refresh=False,
        )
        self.bar.n = self._base + done
        now = time.perf_counter()
        if now - self._drawn >= self._interval or not status:
            self._drawn = now
            self.bar.refresh()

    def finish_run(self) -> None:
        if self._run is not None:
            self._base += self._run.total
            self.bar.n = self._base
            self.bar.refresh()
        self._run = None

    def skip_run(self, run: RunProgress) -> None:
        self._base += run.total
        self.bar.n = self._base
        self.bar.refresh()

    def close(self) -> None:
        self.bar.close()
