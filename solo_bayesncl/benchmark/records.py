"""A finished run's records (:data:`RUN_RECORDS`): the few small files its table row, epoch curves
and gate measures are read from. They name no path of the machine that trained: ``result.json``
names the run's files relative to the run folder (:func:`recorded_path`). The readers here
refuse a record that is not what its name says with :class:`RecordsError`, naming the file and
the field at fault. :func:`keep_run_records` keeps a study's finished runs in the committed
folder, never replacing a differing record nor keeping a run whose code was not a commit."""

from __future__ import annotations

import csv
import functools
import json
import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from solo_bayesncl.io.files import replacing, write_text_replacing

__all__ = [
    "RUN_RECORDS",
    "RecordsError",
    "add_commit_lines",
    "epoch_metrics",
    "keep_run_records",
    "load_gate_measures",
    "load_record",
    "load_result",
    "located",
    "read_result",
    "recorded_path",
    "records_to_keep",
]

RUN_RECORDS: tuple[str, ...] = ("result.json", "pretrain_metrics.csv", "gate_measures.json")
"""The files of a finished run kept with its results: its result, its per-epoch metrics (the
budget curves) and, once measured, the gate measures read from its final checkpoint."""

RECORDED_PATHS: tuple[str, ...] = ("checkpoint", "pretrain_metrics_csv")
"""The keys of ``result.json`` that name a file of the run."""

COMMIT_FILE = "COMMIT"
"""The file of a results folder naming, one line per kept run, its commit (:func:`commit_line`)."""


class RecordsError(ValueError):
    """A run's records cannot be read or kept."""


_NULL = type(None)
_KINDS: dict[str, tuple[type, ...]] = {  # what a field must be: the JSON types it may have
    "text": (str,), "text or null": (str, _NULL), "a whole number": (int,),
    "a number or null": (int, float, _NULL), "an object": (dict,),
    "an object or null": (dict, _NULL),
}  # fmt: skip
RESULT_FIELDS: dict[str, tuple[str, str | None]] = {
    # field: (what it must be, what each of its entries must be); null: an undefined figure
    **dict.fromkeys(("method", "variant", "commit", "checkpoint", "pretrain_metrics_csv"),
                    ("text", None)),
    "seed": ("a whole number", None),
    "linear_probe": ("text or null", None),
    **dict.fromkeys(("linear_top1", "probe_top1", "knn_top1", "seconds_per_epoch",
                     "cpu_seconds_per_epoch", "peak_memory_mb", "epoch_load_mean", "cpu_count",
                     "threads"),
                    ("a number or null", None)),
    **dict.fromkeys(("metrics", "metrics_paper", "background"), ("an object", "a number or null")),
    "gate_open_rate": ("an object or null", "a number or null"),
    "timing": ("an object", "an object or null"),
}  # fmt: skip
"""The fields of ``result.json`` its readers use, each checked by :func:`load_result` if present."""
REQUIRED_FIELDS: tuple[str, ...] = ("method", "seed")
"""The fields every result has: its row and seed."""
KEPT_FIELDS: tuple[str, ...] = (*REQUIRED_FIELDS, "commit")
"""The fields of a result kept in the committed folder (its ``COMMIT`` line)."""


def _refused(path: Path, what: str, problem: str, redo: str) -> RecordsError:
    return RecordsError(
        f"{path}: not {what} ({problem}); it was cut short or edited: restore it, or remove it "
        f"and {redo}"
    )


def load_record(path: Path, what: str, redo: str) -> dict[str, Any]:
    """The JSON object a record holds; :class:`RecordsError` naming the file, ``what`` it is and
    what removing it does (``redo``) when it is unreadable or not a JSON object."""
    try:
        record = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        problem = f"not valid JSON at line {err.lineno} column {err.colno}: {err.msg}"
    except UnicodeDecodeError:
        problem = "not text"
    except OSError as err:
        problem = f"cannot be read: {err.strerror or err}"
    else:
        if isinstance(record, dict):
            return record
        problem = f"a JSON {_json_kind(record)}, not an object"
    raise _refused(path, what, problem, redo)


def load_result(result_file: Path, required: Sequence[str] = REQUIRED_FIELDS) -> dict[str, Any]:
    """A run's ``result.json`` as written, with every ``required`` field and every field of
    :data:`RESULT_FIELDS` of its kind, else :class:`RecordsError` naming the file and field."""
    what, redo = "a finished run's result", "the run is trained again"
    result = load_record(result_file, what, redo)
    problems = [f"field '{name}' is missing" for name in required if name not in result]
    for name, (kind, entries) in RESULT_FIELDS.items():
        value = result.get(name)
        fields = [(name, value, kind)] if name in result else []
        if entries and isinstance(value, dict):
            fields += [(f"{name}.{key}", entry, entries) for key, entry in value.items()]
        problems += [
            f"field '{field}' must be {must}, got {_shown(entry)}"
            for field, entry, must in fields
            if type(entry) not in _KINDS[must]
        ]
    if problems:
        raise _refused(result_file, what, problems[0], redo)
    return result


def _shown(value: Any) -> str:
    text = repr(value) if isinstance(value, str) else json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def epoch_metrics(metrics_csv: Path) -> dict[str, dict[int, float]]:
    """A run's per-epoch figures (``pretrain_metrics.csv``): ``{column: {epoch (from 1): value}}``,
    an epoch's last value kept; :class:`RecordsError` naming the file, line and column."""
    stat = Path(metrics_csv).stat()
    return _epoch_metrics(Path(metrics_csv), stat.st_mtime_ns, stat.st_size)


def _bad_curves(metrics_csv: Path, problem: str) -> RecordsError:
    return _refused(
        metrics_csv, "a run's per-epoch metrics", problem, "its curves are left out of the plots"
    )


@functools.lru_cache(maxsize=256)
def _epoch_metrics(metrics_csv: Path, mtime_ns: int, size: int) -> dict[str, dict[int, float]]:
    series: dict[str, dict[int, float]] = {}
    try:
        with open(metrics_csv, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            if "epoch" not in (reader.fieldnames or ()):
                raise _bad_curves(metrics_csv, "no 'epoch' column")
            for row in reader:
                if None in row:  # the cells past the header's
                    raise _bad_curves(
                        metrics_csv, f"line {reader.line_num}: more cells than columns"
                    )
                values = {column: _cell(metrics_csv, reader.line_num, column, cell)
                          for column, cell in row.items() if cell}  # fmt: skip
                epoch = values.pop("epoch", None)
                if epoch is not None and not epoch.is_integer():
                    problem = f"line {reader.line_num}, column 'epoch': {row['epoch']!r}"
                    raise _bad_curves(metrics_csv, problem + " is not a whole number")
                for column, value in values.items() if epoch is not None else ():
                    series.setdefault(column, {})[int(epoch) + 1] = value
    except UnicodeDecodeError:
        raise _bad_curves(metrics_csv, "not UTF-8 text") from None
    except (csv.Error, OSError) as err:
        raise _bad_curves(metrics_csv, f"not CSV: {err}") from None
    return series


def _cell(metrics_csv: Path, line: int, column: str, cell: str) -> float:
    try:
        return float(cell)
    except ValueError:
        problem = f"line {line}, column '{column}': {cell!r} is not a number"
        raise _bad_curves(metrics_csv, problem) from None


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
    """Where a file that ``result.json`` names is now: a relative name against ``run_dir``; a
    missing absolute one below a folder named like the run's at the same place below ``run_dir``."""
    path = Path(recorded)
    if not path.is_absolute():
        return run_dir / path
    parts = path.parts
    if path.exists() or run_dir.name not in parts:
        return path
    below = len(parts) - parts[::-1].index(run_dir.name)
    return run_dir.joinpath(*parts[below:])


def read_result(run_dir: Path) -> dict[str, Any]:
    """A finished run's ``result.json``, its files :func:`located`, its epoch metrics checked."""
    result = load_result(run_dir / "result.json")
    for key in RECORDED_PATHS:
        if result.get(key):
            result[key] = str(located(run_dir.absolute(), result[key]))
    if result.get("pretrain_metrics_csv") and Path(result["pretrain_metrics_csv"]).is_file():
        epoch_metrics(Path(result["pretrain_metrics_csv"]))
    return result


def load_gate_measures(path: Path) -> dict[str, Any]:
    """A run's ``gate_measures.json`` (:func:`load_record`)."""
    redo = "they are measured again from the run's checkpoint"
    return load_record(path, "the gate measures of a run", redo)


def commit_line(result: dict[str, Any]) -> str:
    """The ``COMMIT`` line of a finished run: ``<commit> <variant or method> seed <seed>``."""
    row = result.get("variant") or result["method"]
    return f"{result['commit']} {row} seed {result['seed']}"


def records_to_keep(source_run: Path, kept_run: Path) -> list[str]:
    """The records of the finished run ``source_run`` that ``kept_run`` lacks, ``result.json`` last;
    :class:`RecordsError` for an unfinished, unreadable or uncommitted run or a differing record."""
    result_file = source_run / "result.json"
    if not result_file.is_file():
        raise RecordsError(f"{source_run}: not finished (no result.json); nothing is kept of it")
    dirty = load_result(result_file, KEPT_FIELDS).get("dirty")
    if dirty is not False:
        raise RecordsError(
            f"{result_file}: dirty is {json.dumps(dirty)}: the run was not trained from a commit "
            "(uncommitted changes, or no git checkout), so its records are not kept"
        )
    missing = []
    readers = {"pretrain_metrics.csv": epoch_metrics, "gate_measures.json": load_gate_measures}
    for name in RUN_RECORDS:
        source, kept = source_run / name, kept_run / name
        if not source.is_file():
            continue
        if name in readers:
            readers[name](source)
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
    """Copies :func:`records_to_keep` into ``kept_run``, each file whole; returns their names."""
    names = records_to_keep(source_run, kept_run)
    for name in names:
        with replacing(kept_run / name) as tmp:
            shutil.copyfile(source_run / name, tmp)
    return names


def add_commit_lines(results_dir: Path, results: Iterable[dict[str, Any]]) -> list[str]:
    """Appends the :func:`commit_line` s missing from ``results_dir/COMMIT``; returns them."""
    commit_file = results_dir / COMMIT_FILE
    lines = commit_file.read_text().splitlines() if commit_file.is_file() else []
    added = [line for line in dict.fromkeys(commit_line(r) for r in results) if line not in lines]
    if added:
        write_text_replacing(commit_file, "".join(f"{line}\n" for line in [*lines, *added]))
    return added
