"""A finished run's records: the few files its table row, epoch curves and gate measures are read
from, and how they name the run's other files so that they can be moved, committed and read on
another machine.

A run folder (``RESULTS_DIR/runs/<method>-seed<seed>-<key>/``) holds the checkpoints, the stage
files, the log and these records (:data:`RUN_RECORDS`). The records are small and name no path
of the machine that trained: ``result.json`` names the run's checkpoint and metrics file relative
to the run folder (:func:`recorded_path`). The checkpoints stay where they were trained (or go
to the zoo); the tables, the budget curves, ``budget --shorter`` and ``background_gates`` for a
run that logged its gate measures need nothing but the records.

``result.json`` files written before the records were relative name absolute paths;
:func:`read_result` finds those files inside the run folder when it has moved since.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["RECORDED_PATHS", "RUN_RECORDS", "located", "read_result", "recorded_path"]

RUN_RECORDS: tuple[str, ...] = ("result.json", "pretrain_metrics.csv", "gate_measures.json")
"""The files of a finished run that are kept with its results (the project's ``.gitignore``
tracks exactly these under ``results/*/runs/``): the run's result, its per-epoch metrics (the
budget curves) and, once measured, the gate measures read from its final checkpoint."""

RECORDED_PATHS: tuple[str, ...] = ("checkpoint", "pretrain_metrics_csv")
"""The keys of ``result.json`` that name a file of the run."""


def recorded_path(run_dir: Path, path: str | Path) -> str:
    """How ``result.json`` names ``path``: relative to ``run_dir`` when it lies inside it (the run
    folder may be reached through a link, as the sweep's are), else as given."""
    path = Path(path)
    try:
        return str(path.resolve().relative_to(run_dir.resolve()))
    except ValueError:
        return str(path)


def located(run_dir: Path, recorded: str | Path) -> Path:
    """Where a file that ``result.json`` names is now: a relative name against ``run_dir``; an
    absolute one that no longer exists but lies below a folder named like the run's (the results
    folder was moved or copied from another machine) at the same place below ``run_dir``."""
    path = Path(recorded)
    if not path.is_absolute():
        return run_dir / path
    parts = path.parts
    if path.exists() or run_dir.name not in parts:
        return path
    below = len(parts) - parts[::-1].index(run_dir.name)
    return run_dir.joinpath(*parts[below:])


def read_result(run_dir: Path) -> dict[str, Any]:
    """A finished run's ``result.json``, with the files it names (:data:`RECORDED_PATHS`)
    resolved by :func:`located` to absolute paths."""
    result = json.loads((run_dir / "result.json").read_text())
    for key in RECORDED_PATHS:
        if result.get(key):
            result[key] = str(located(run_dir.absolute(), result[key]))
    return result
