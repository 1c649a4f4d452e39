"""What the study's commands read: the finished runs of a benchmark results folder, each one's
result read without a preset, so whatever version of the code ran it, and the command line they
share (``RESULTS_DIR``, ``--methods``, ``--out``)."""

from __future__ import annotations

import argparse
import csv
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from solo_bayesncl.benchmark.records import RecordsError, read_result
from solo_bayesncl.benchmark.table import run_name

__all__ = [
    "Rows",
    "finished_results",
    "finished_runs",
    "folder_rows",
    "parse_methods",
    "results_folder_parser",
]

Rows = Sequence[str] | Mapping[str, frozenset[int] | None]
"""Which finished runs a command reads: row names, or row names with the seeds to read of each
(None: every seed), as :func:`folder_rows` gives them."""


def _selected(result: dict[str, Any], methods: Rows | None) -> bool:
    if methods is None:
        return True
    name = run_name(result)
    if name not in methods:
        return False
    seeds = methods[name] if isinstance(methods, Mapping) else None
    return seeds is None or int(result["seed"]) in seeds


def finished_runs(
    results_dir: Path, methods: Rows | None = None
) -> list[tuple[Path, dict[str, Any]]]:
    """``(run folder, result)`` of each finished run under ``results_dir/runs`` (of the rows, and
    seeds, ``methods`` selects when given), read without a preset, so whatever version of the
    code ran them; exits with a one-line error naming the folder when there are none, or the
    file when a ``result.json`` is not a result (half-written, edited)."""
    runs = results_dir / "runs"
    if not runs.is_dir():
        raise SystemExit(f"error: {runs} does not exist: pass a benchmark results folder")
    found = []
    for result_file in sorted(runs.glob("*/result.json")):
        try:
            result = read_result(result_file.parent)
        except RecordsError as err:
            raise SystemExit(f"error: {err}") from None
        if _selected(result, methods):
            found.append((result_file.parent, result))
    if not found:
        among = f" of {', '.join(methods)}" if methods else ""
        raise SystemExit(f"error: no finished run{among} in {runs}")
    return found


def results_folder_parser(prog: str, description: str, out: str) -> argparse.ArgumentParser:
    """The command line of a command reading a results folder: ``RESULTS_DIR``, ``--methods``
    (parsed by :func:`parse_methods`) and ``--out`` (default ``RESULTS_DIR/<out>``)."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("results_dir", type=Path, help="a benchmark results folder")
    parser.add_argument(
        "--methods",
        help="comma-separated benchmark rows to read, every seed of each (default: the rows and "
        "seeds of RESULTS_DIR/results.csv, else every finished run)",
    )
    parser.add_argument("--out", type=Path, help=f"default: RESULTS_DIR/{out}")
    return parser


def parse_methods(value: str | None) -> list[str] | None:
    """The rows of a ``--methods a,b`` option; None (every row) when it is not given."""
    return [m for m in value.split(",") if m] if value else None


def folder_rows(results_dir: Path, methods: str | None) -> Rows | None:
    """The runs a command reading ``results_dir`` reads: every seed of the rows of ``--methods``
    when given, else the rows and seeds of the folder's table (``results.csv``, which the
    benchmark writes from its preset's runs only; every seed of a row where a table written
    before it listed the seeds does not), else every finished run (None). A folder whose ``runs``
    another preset shares therefore reads its own runs, not the other preset's."""
    if methods:
        return parse_methods(methods)
    table = results_dir / "results.csv"
    if not table.is_file():
        return None
    with open(table, newline="") as f:
        rows = {row["method"]: _seed_list(table, row) for row in csv.DictReader(f)}
    return rows or None


def _seed_list(table: Path, row: dict[str, str]) -> frozenset[int] | None:
    """The seeds a row of ``results.csv`` lists (None: the column is absent or empty); exits
    with a one-line error naming the table and the row when they are not whole numbers."""
    text = row.get("seed_list")
    if not text:
        return None
    try:
        return frozenset(int(seed) for seed in text.split())
    except ValueError:
        raise SystemExit(
            f"error: {table}: row {row.get('method')}: seed_list {text!r} is not a list of seeds "
            "(whole numbers separated by spaces, e.g. '1 2 3'); fix the row, or pass --methods "
            "to read the runs without the table"
        ) from None


def finished_results(results_dir: Path, methods: Rows | None = None) -> list[dict[str, Any]]:
    """The results of :func:`finished_runs`."""
    return [result for _, result in finished_runs(results_dir, methods)]
