"""What a run says when it ends: finished or interrupted (by which signal, at which epoch and
step), its furthest checkpoint, its metrics file; a run folder left without a checkpoint is
removed. The commands print :func:`run_summary`; the benchmark's stages read the same facts."""

from __future__ import annotations

import csv
import shutil
import signal
from pathlib import Path

from solo_bayesncl.training.auto_resume import ResumePoint, resume_order

__all__ = [
    "csv_log_dir",
    "drop_folder_without_checkpoint",
    "last_logged_value",
    "run_summary",
    "stopping_signal",
]


def last_logged_value(metrics_csv: Path, column: str) -> float | None:
    """The last non-empty value of ``column`` in a Lightning ``metrics.csv``; None if never logged."""
    value = None
    with open(metrics_csv, newline="") as f:
        for row in csv.DictReader(f):
            if row.get(column):
                value = float(row[column])
    return value


def csv_log_dir(trainer) -> Path:
    """The folder of the trainer's CSV logger: where this fit's ``metrics.csv`` is written."""
    from lightning.pytorch.loggers import CSVLogger

    for logger in trainer.loggers:
        if isinstance(logger, CSVLogger):
            return Path(logger.log_dir)
    raise ValueError("the trainer has no CSV logger (build_loggers adds one to every run)")


def stopping_signal(trainer) -> signal.Signals | None:
    """The signal that stopped the trainer's fit (SIGTERM, or SIGINT for Ctrl-C); None when the
    fit was not interrupted."""
    if not trainer.interrupted:
        return None
    return signal.SIGTERM if getattr(trainer, "received_sigterm", False) else signal.SIGINT


def _this_runs_checkpoint(trainer) -> Path | None:
    """The furthest checkpoint among those the fit saved and the one it resumed from; never
    another file of the folder (one another configuration left there is not this run's)."""
    paths = [
        getattr(callback, name, None)
        for callback in trainer.callbacks
        for name in ("last_ckpt", "best_model_path")  # solo-learn's and Lightning's callbacks
    ]
    paths.append(trainer.ckpt_path)
    found = [Path(p) for p in paths if p and Path(str(p)).is_file()]
    return resume_order(found)[0] if found else None


def drop_folder_without_checkpoint(trainer, checkpointing: bool) -> Path | None:
    """After an interrupted fit that saves checkpoints (``checkpointing``), removes its run folder
    when no checkpoint is in it (a folder of ``args.json`` and logs would be mistaken for a
    run); returns the removed folder."""
    if not trainer.interrupted or not checkpointing or not trainer.is_global_zero:
        return None
    try:
        folder = csv_log_dir(trainer)
    except ValueError:
        return None
    if not folder.is_dir() or any(folder.glob("*.ckpt")):
        return None
    shutil.rmtree(folder, ignore_errors=True)
    return folder


def run_summary(trainer) -> dict[str, str | float | None]:
    """What a fit ended with: ``val_acc1`` (the last validation top-1), ``checkpoint``
    (:func:`_this_runs_checkpoint`), ``metrics_csv``, its ``folder``, whether it saved checkpoints
    (``checkpointing``) and, for an interrupted fit, where it stopped (``interrupted``: ``epoch
    E, step S``) and the ``signal`` (:func:`stopping_signal`)."""
    try:
        folder: Path | None = csv_log_dir(trainer)
    except ValueError:  # a Trainer built elsewhere, without the CSV logger
        folder = None
    own = _this_runs_checkpoint(trainer)
    checkpoint = str(own) if own is not None else None
    path = folder / "metrics.csv" if folder is not None else None
    metrics_csv = str(path) if path is not None and path.is_file() else None
    val_acc1 = last_logged_value(Path(metrics_csv), "val_acc1") if metrics_csv else None
    if val_acc1 is None and "val_acc1" in trainer.callback_metrics:
        val_acc1 = float(trainer.callback_metrics["val_acc1"])
    stopped = stopping_signal(trainer)
    where = ResumePoint(trainer.current_epoch, trainer.global_step).phrase()
    from solo.utils.checkpointer import Checkpointer

    return {
        "checkpointing": any(isinstance(c, Checkpointer) for c in trainer.callbacks),
        "val_acc1": val_acc1,
        "checkpoint": checkpoint,
        "metrics_csv": metrics_csv,
        "interrupted": where if stopped is not None else None,
        "signal": stopped.name if stopped is not None else None,
        "folder": str(folder) if folder is not None else None,
    }
