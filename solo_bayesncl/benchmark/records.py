"""A finished run's records (:data:`RUN_RECORDS`): the few small files its table row, epoch curves
and gate measures are read from. They name no path of the machine that trained: ``result.json``
names the run's files relative to the run folder (:func:`recorded_path`; older absolute paths are
found inside a moved folder by :func:`read_result`). :func:`load_result` refuses a
``result.json`` that is not a result with :class:`RecordsError`. :func:`keep_run_records` and
:func:`add_commit_lines` keep a study's finished runs in the committed folder, never replacing a
differing record nor keeping a run whose code was not a commit."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from solo_bayesncl.io.files import replacing, write_text_replacing

__all__ = [
    "COMMIT_FILE",
    "RECORDED_PATHS",
    "RUN_RECORDS",
    "RecordsError",
    "add_commit_lines",
    "commit_line",
    "keep_run_records",
    "load_result",
    "located",
    "read_result",
    "recorded_path",
    "records_to_keep",
]

RUN_RECORDS: tuple[str, ...] = ("result.json", "pretrain_metrics.csv", "gate_measures.json")
"""The files of a finished run that are kept with its results (a checkout that commits kept
records tracks exactly these of each run): the run's result, its per-epoch metrics (the budget
curves) and, once measured, the gate measures read from its final checkpoint."""

RECORDED_PATHS: tuple[str, ...] = ("checkpoint", "pretrain_metrics_csv")
"""The keys of ``result.json`` that name a file of the run."""

COMMIT_FILE = "COMMIT"
"""The file of a results folder that names, one line per kept run, the commit it was trained at
(:func:`commit_line`)."""


class RecordsError(ValueError):
    """A run's records cannot be read or kept: its ``result.json`` is not a result, the run is
    not finished, its code was not a commit, or the results folder already holds different
    records under its name."""


def load_result(
    result_file: Path,
    what: str = "a finished run's result",
    redo: str = "the run is trained again",
) -> dict[str, Any]:
    """The object a run's ``result.json`` holds, as written; :class:`RecordsError` naming the
    file when it cannot be read, is not JSON (half-written) or holds no JSON object. A stage's
    record is read the same way, ``what`` it is and what removing it does (``redo``) named."""
    problem = None
    try:
        result = json.loads(Path(result_file).read_text())
    except json.JSONDecodeError as err:
        problem = f"not valid JSON at line {err.lineno} column {err.colno}: {err.msg}"
    except UnicodeDecodeError:
        problem = "not text"
    except OSError as err:
        problem = f"cannot be read: {err.strerror or err}"
    else:
        if not isinstance(result, dict):
            problem = f"a JSON {_json_kind(result)}, not an object"
    if problem is not None:
        raise RecordsError(
            f"{result_file}: not {what} ({problem}); it was cut short or edited: restore it, "
            f"or remove it and {redo}"
        )
    return result


def _json_kind(value: Any) -> str:
    kinds = {list: "list", str: "string", bool: "boolean", int: "number", float: "number"}
    return "null" if value is None else kinds.get(type(value), type(value).__name__)


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
    resolved by :func:`located` to absolute paths (:class:`RecordsError` as
    :func:`load_result` says)."""
    result = load_result(run_dir / "result.json")
    for key in RECORDED_PATHS:
        if result.get(key):
            result[key] = str(located(run_dir.absolute(), result[key]))
    return result


def commit_line(result: dict[str, Any]) -> str:
    """The ``COMMIT`` line of a finished run: ``<commit> <row> seed <seed>``, the row being its
    variant name, or its method."""
    row = result.get("variant") or result["method"]
    return f"{result['commit']} {row} seed {result['seed']}"


def records_to_keep(source_run: Path, kept_run: Path) -> list[str]:
    """The records of the finished run ``source_run`` that ``kept_run`` lacks, ``result.json`` last;
    writes nothing. :class:`RecordsError` when the run is not finished, was trained from
    uncommitted changes (not ``"dirty": false``), or ``kept_run`` holds a differing record."""
    result_file = source_run / "result.json"
    if not result_file.is_file():
        raise RecordsError(f"{source_run}: not finished (no result.json); nothing is kept of it")
    dirty = load_result(result_file).get("dirty")
    if dirty is not False:
        raise RecordsError(
            f"{result_file}: dirty is {json.dumps(dirty)}: the run was not trained from a commit "
            "(uncommitted changes, or no git checkout), so its records are not kept"
        )
    missing = []
    for name in RUN_RECORDS:
        source, kept = source_run / name, kept_run / name
        if not source.is_file():
            continue
        if not kept.is_file():
            missing.append(name)
        elif kept.read_bytes() != source.read_bytes():
            raise RecordsError(
                f"{kept} differs from {source}: a kept record is never replaced (remove it by "
                "hand if the kept run is the one to drop)"
            )
    # result.json last: to every reader, a folder with a result holds a finished run
    return sorted(missing, key=lambda name: name == "result.json")


def keep_run_records(source_run: Path, kept_run: Path) -> list[str]:
    """Copies into ``kept_run`` the :func:`records_to_keep` of ``source_run`` (raising as it
    does, before anything is written), each file whole or not at all; returns their names
    (none when ``kept_run`` holds them already)."""
    names = records_to_keep(source_run, kept_run)
    for name in names:
        with replacing(kept_run / name) as tmp:
            shutil.copyfile(source_run / name, tmp)
    return names


def add_commit_lines(results_dir: Path, results: Iterable[dict[str, Any]]) -> list[str]:
    """Appends to ``results_dir/COMMIT`` the :func:`commit_line` of each result it does not list
    yet, keeping the lines it has; returns the lines added."""
    commit_file = results_dir / COMMIT_FILE
    lines = commit_file.read_text().splitlines() if commit_file.is_file() else []
    added = [line for line in dict.fromkeys(commit_line(r) for r in results) if line not in lines]
    if added:
        write_text_replacing(commit_file, "".join(f"{line}\n" for line in [*lines, *added]))
    return added
