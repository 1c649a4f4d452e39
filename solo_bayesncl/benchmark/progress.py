"""The benchmark's progress: the run process writes ``status.json``, the benchmark process shows
one tqdm bar over every epoch of every run (kNN and the report one step each).

The time left (:class:`RunEstimate`) adds up each stage's remainder at a measured pace: the
stage's finished epochs, else the finished runs' (:class:`StageTimes`), else a guess from the
pretraining epoch (:data:`GUESSED_SHARE`), else the epoch's own pace once a quarter is done.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from solo_bayesncl.io.files import write_text_replacing

__all__ = [
    "GUESSED_SHARE",
    "STAGES",
    "ProgressDisplay",
    "RunEstimate",
    "RunProgress",
    "StageTimes",
    "StatusFile",
    "read_status",
]

STAGES: tuple[str, ...] = ("pretrain", "linear", "knn", "report")
GUESSED_SHARE: dict[str, float] = {"linear": 0.3, "knn": 0.4, "report": 0.7}
"""A linear epoch, kNN and the report in pretraining epochs, until a run has measured them."""
_PARTIAL_EPOCH = 0.25
"""The share of an epoch after which its own pace is trusted when nothing else is measured."""


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
        p, n = self.pretrain_epochs, self.pretrain_epochs + self.linear_epochs
        offset = dict(zip(STAGES, (0, p, n, n + 1), strict=True))[stage]
        return min(float(offset) + self.position(status), float(self.total))

    @staticmethod
    def describe(status: dict[str, Any]) -> str:
        """``pretrain epoch 3/6``, ``pretrain epoch 4/6, resumed from epoch 3, step 57``,
        ``knn``, ``starting``."""
        stage = status.get("stage")
        if stage is None:
            return "starting"
        text = str(stage)
        if stage in ("pretrain", "linear") and "epoch" not in status:
            return f"{stage}, starting"
        if stage in ("pretrain", "linear") and status.get("epochs"):
            epochs = status["epochs"]
            text = f"{stage} epoch {min(status.get('epoch', 0) + 1, epochs)}/{epochs}"
            resumed = status.get("resumed")
            if resumed:
                text += f", resumed from epoch {resumed['epoch']}, step {resumed['step']}"
        return text

    def position(self, status: dict[str, Any]) -> float:
        """Epochs of the current stage finished (fractional); 0 outside the stages with epochs."""
        if status.get("stage") not in ("pretrain", "linear"):
            return 0.0
        epochs = self.pretrain_epochs if status["stage"] == "pretrain" else self.linear_epochs
        batches = status.get("batches") or 0
        fraction = min(status.get("batch", 0) / batches, 1.0) if batches else 0.0
        return min(status.get("epoch", 0) + fraction, float(epochs))


@dataclass
class StageTimes:
    """Seconds per epoch of each stage, the mean over this benchmark's finished runs."""

    measured: dict[str, list[float]] = field(default_factory=dict)

    def learn(self, result: dict[str, Any], linear_epochs: int) -> None:
        """Adds a finished run's ``result.json``."""
        timing = result.get("timing") or {}
        found = {s: (timing.get(s) or {}).get("wall_s") for s in STAGES[1:]}
        found["pretrain"] = result.get("seconds_per_epoch")
        if found["linear"] is not None:
            found["linear"] /= max(linear_epochs, 1)
        for stage, seconds in found.items():
            if isinstance(seconds, int | float) and seconds > 0:
                self.measured.setdefault(stage, []).append(float(seconds))

    def mean(self, stage: str) -> float | None:
        """The measured mean (per epoch for pretraining and linear), None before any run."""
        values = self.measured.get(stage)
        return sum(values) / len(values) if values else None

    def unit(self, stage: str, pretrain_epoch_s: float | None) -> float | None:
        """:meth:`mean`, else the :data:`GUESSED_SHARE` of a pretraining epoch."""
        measured = self.mean(stage)
        if measured is not None or stage == "pretrain" or pretrain_epoch_s is None:
            return measured
        return GUESSED_SHARE[stage] * pretrain_epoch_s

    def whole_run(self, run: RunProgress, pretrain_epoch_s: float | None) -> float | None:
        """Seconds a run not yet started will take; None while a stage's pace is unknown."""
        pretrain = self.mean("pretrain") or pretrain_epoch_s
        seconds = [pretrain] + [self.unit(stage, pretrain) for stage in STAGES[1:]]
        if any(s is None for s in seconds):
            return None
        units = (run.pretrain_epochs, run.linear_epochs, 1, 1)
        return sum(n * s for n, s in zip(units, seconds, strict=True))


class RunEstimate:
    """Seconds left of the run in progress (see the module docstring): ``update(status)``
    returns it, None while a stage's pace is unknown or the stage has no epoch yet."""

    def __init__(self, run: RunProgress, times: StageTimes, clock: Callable[[], float]) -> None:
        self.run, self.times, self.clock = run, times, clock
        self._measured: dict[str, float] = {}  # this run's mean epoch time per stage
        self._pace: dict[str, float] = {}  # the last epoch time used per stage
        self._stage: str | None = None
        self._stage_since = 0.0
        self._first_seen: tuple[tuple[str, int], float, float] | None = None

    def pretrain_epoch_s(self) -> float | None:
        """This run's pretraining epoch time (measured, else extrapolated), else the runs'."""
        return (
            self._measured.get("pretrain")
            or self.times.mean("pretrain")
            or self._pace.get("pretrain")
        )

    def _extrapolated(self, stage: str, status: dict[str, Any], now: float) -> float | None:
        """The current epoch's own pace, once a quarter of it went by since first seen."""
        key = (stage, int(status["epoch"]))
        done = self.run.position(status)
        if status.get("batch", 0) < 1:
            return None
        if self._first_seen is None or self._first_seen[0] != key:
            self._first_seen = (key, now, done)
            return None
        _, since, first = self._first_seen
        enough = done - first >= _PARTIAL_EPOCH - 1e-9  # a quarter, whatever the rounding
        return (now - since) / (done - first) if enough else None

    def _epoch_seconds(self, stage: str, status: dict[str, Any], now: float) -> float | None:
        current = status.get("stage") == stage
        if current and status.get("epoch_s"):
            self._measured[stage] = float(status["epoch_s"])
        pace = self._measured.get(stage) or self.times.mean(stage)
        if pace is None and stage == "linear":
            pace = self.times.unit("linear", self.pretrain_epoch_s())
        if pace is None and current:
            pace = self._extrapolated(stage, status, now)
        if pace is not None:
            self._pace[stage] = pace
        return pace

    def update(self, status: dict[str, Any]) -> float | None:
        now = self.clock()
        stage = status.get("stage")
        if stage == "done":
            return 0.0
        if stage not in STAGES:  # not started yet: it may resume from anywhere
            return None
        if stage in ("pretrain", "linear") and "epoch" not in status:
            return None
        if stage != self._stage:
            self._stage, self._stage_since = stage, now
        left = 0.0
        for name in STAGES[STAGES.index(stage) :]:
            if name in ("pretrain", "linear"):
                epochs = self.run.pretrain_epochs if name == "pretrain" else self.run.linear_epochs
                remaining = epochs - (self.run.position(status) if name == stage else 0.0)
                pace = self._epoch_seconds(name, status, now)
                if pace is None:
                    return None
                left += remaining * pace
            else:
                pace = self.times.unit(name, self.pretrain_epoch_s())
                if pace is None:
                    return None
                # what it took so far counts against it; an overrun counts as done
                left += max(pace - (now - self._stage_since), 0.0) if name == stage else pace
        return left


def format_seconds(seconds: float | None) -> str:
    """``1:02:03``, ``4:05``; ``?`` for unknown."""
    if seconds is None:
        return "?"
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class ProgressDisplay:
    """One tqdm bar for the whole benchmark, with the time left for the run and for all ``runs``."""

    def __init__(
        self,
        total: int,
        initial: float = 0.0,
        file=None,
        runs: Sequence[RunProgress] = (),
        times: StageTimes | None = None,
    ) -> None:
        tqdm.monitor_interval = 0  # no monitor thread in the process that starts the runs
        self.bar = tqdm(
            total=total,
            initial=initial,
            unit="epoch",
            file=file,
            dynamic_ncols=True,
            bar_format="{desc} |{bar}| {percentage:3.0f}% all runs [{elapsed}{postfix}]",
        )
        stream = self.bar.fp
        # a terminal redraws in place; a log file (CI, nohup) gets a line every 30 s
        self._interval = 0.5 if getattr(stream, "isatty", lambda: False)() else 30.0
        self._clock = time.perf_counter
        self._drawn = 0.0
        self._base = initial
        self._label = ""
        self._run: RunProgress | None = None
        self._estimate: RunEstimate | None = None
        self._run_start = 0.0
        self._waiting: list[RunProgress] = list(runs)  # not started nor skipped yet
        self.times = times if times is not None else StageTimes()
        self.run_left: float | None = None
        self.all_left: float | None = None

    def write(self, line: str) -> None:
        self.bar.write(line)

    def _leave(self, run: RunProgress) -> None:
        self._waiting = [r for r in self._waiting if r is not run]

    def start_run(self, label: str, run: RunProgress) -> None:
        self._label, self._run = label, run
        self._leave(run)
        self._run_start = self._clock()
        self._estimate = RunEstimate(run, self.times, self._clock)
        self.update({})

    def update(self, status: dict[str, Any]) -> None:
        """Shows ``status`` of the run in progress (method, seed, stage, epoch, times)."""
        if self._run is None or self._estimate is None:
            return
        done = self._run.done(status)
        elapsed = self._clock() - self._run_start
        self.run_left = self._estimate.update(status)
        pretrain_s = self._estimate.pretrain_epoch_s()
        later = [self.times.whole_run(r, pretrain_s) for r in self._waiting]
        self.all_left = (
            None
            if self.run_left is None or any(s is None for s in later)
            else self.run_left + sum(later)
        )
        self.bar.set_description_str(
            f"{self._label} | {RunProgress.describe(status)} | "
            f"{format_seconds(elapsed)} elapsed, ~{format_seconds(self.run_left)} left",
            refresh=False,
        )
        self.bar.set_postfix_str(f"~{format_seconds(self.all_left)} left", refresh=False)
        self.bar.n = self._base + done
        now = self._clock()
        if now - self._drawn >= self._interval or not status:
            self._drawn = now
            self.bar.refresh()

    def finish_run(self) -> None:
        if self._run is not None:
            self._base += self._run.total
            self.bar.n = self._base
            self.bar.refresh()
        self._run = None
        self._estimate = None

    def skip_run(self, run: RunProgress) -> None:
        self._leave(run)
        self._base += run.total
        self.bar.n = self._base
        self.bar.refresh()

    def close(self) -> None:
        self.bar.close()
