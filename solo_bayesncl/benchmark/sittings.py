"""A pretraining resumed over several sittings, read back as one run: its metrics stitched into
one ``metrics.csv`` and its mean epoch time, each epoch counted once."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from solo_bayesncl.benchmark.machine import StageMeter, load_unreliable
from solo_bayesncl.io.files import replacing

__all__ = ["epoch_timing", "merge_metrics", "metrics_rows", "per_epoch"]


def merge_metrics(run_dir: Path, final_folder: str, out: Path) -> Path:
    """One ``metrics.csv`` for a pretraining resumed over several sittings: each sitting's rows
    by (epoch, step) up to where the next resumed, so steps trained again are not kept twice."""
    log = run_dir / "pretrain_attempts.jsonl"
    entries = [json.loads(x) for x in (log.read_text().splitlines() if log.is_file() else [])]
    chain: list[dict[str, Any]] = []
    index = _last_in(entries, final_folder, len(entries))
    while index is not None and entries[index] not in chain:
        chain.insert(0, entries[index])
        previous = entries[index]["resumed_from"]
        index = _last_in(entries, str(Path(previous).parent), index) if previous else None
    if not chain:
        chain = [{"folder": final_folder, "start_epoch": 0, "start_step": 0}]
    rows: list[dict[str, str]] = []
    fields: list[str] = []
    for i, sitting in enumerate(chain):
        end = chain[i + 1] if i + 1 < len(chain) else None
        path = Path(sitting["folder"]) / "metrics.csv"
        if not path.is_file():
            continue
        with open(path, newline="") as f:
            for row in _rows_of(sitting, entries, list(csv.DictReader(f))):
                step = float(row.get("step") or 0)
                if row.get("epoch"):
                    position = (float(row["epoch"]), step)
                    start = (sitting["start_epoch"], sitting["start_step"])
                    stop = (end["start_epoch"], end["start_step"]) if end else None
                else:
                    position, start = (step,), (sitting["start_step"],)
                    stop = (end["start_step"],) if end else None
                if position >= start and (stop is None or position < stop):
                    fields += [k for k in row if k not in fields]
                    rows.append(row)
    with replacing(out) as tmp, open(tmp, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    return out


def _last_in(entries: list[dict[str, Any]], folder: str, before: int) -> int | None:
    """The index of the last sitting logged before ``before`` that wrote to ``folder``."""
    return next((i for i in range(before - 1, -1, -1) if entries[i]["folder"] == folder), None)


def _rows_of(
    sitting: dict[str, Any], entries: list[dict[str, Any]], rows: list[dict[str, str]]
) -> list[dict[str, str]]:
    """The rows of ``metrics.csv`` that ``sitting`` wrote (from its ``rows_before``)."""
    begin = int(sitting.get("rows_before") or 0)
    later = entries[entries.index(sitting) + 1 :] if sitting in entries else []
    end = next(
        (
            int(e["rows_before"])
            for e in later
            if e["folder"] == sitting["folder"] and "rows_before" in e
        ),
        None,
    )
    return rows[begin:end]


def metrics_rows(folder: Path) -> int:
    """The data rows of ``folder``'s ``metrics.csv`` (0 without one)."""
    path = folder / "metrics.csv"
    if not path.is_file():
        return 0
    with open(path, newline="") as f:
        return sum(1 for _ in csv.DictReader(f))


def per_epoch(times: list[dict[str, float]], key: str) -> float | None:
    """Seconds per epoch from timed epochs (``wall_s``/``cpu_s``, and the ``share`` of an epoch
    each covers, 1 unless resumed part-way through): their sum over the epochs they cover."""
    covered = sum(t.get("share", 1.0) for t in times)
    return sum(t[key] for t in times) / covered if covered > 0 else None


def epoch_timing(run_dir: Path, stage: str, epochs: int) -> dict[str, Any]:
    """Wall and CPU seconds per epoch of the finished run (a resumed epoch counted once, by the
    share timed), and whether the machine's load made the wall times unreliable."""
    path = run_dir / f"{stage}_epoch_times.json"
    times = json.loads(path.read_text()) if path.is_file() else {}
    kept = [times[str(e)] for e in range(epochs) if str(e) in times]
    if not kept:
        return {"seconds_per_epoch": None, "cpu_seconds_per_epoch": None}
    wall, cpu = sum(t["wall_s"] for t in kept), sum(t["cpu_s"] for t in kept)
    load = StageMeter(samples_file=run_dir / f"{stage}_load.jsonl").result()
    load.update(wall_s=wall, cpu_s=cpu)
    return {
        "seconds_per_epoch": per_epoch(kept, "wall_s"),
        "cpu_seconds_per_epoch": per_epoch(kept, "cpu_s"),
        "epoch_load_mean": load["load_mean"],
        "cpu_count": load["cpu_count"],
        "wall_unreliable": load_unreliable(load),
    }
