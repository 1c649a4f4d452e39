"""A pretraining resumed within an epoch is read back as one run: its metrics keep the steps the
checkpoint had trained and drop those trained again, and the epoch it resumed part-way through
is not timed as a whole epoch."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from solo_bayesncl.benchmark.sittings import epoch_timing, merge_metrics

MERGED = [
    ("0", "0", "0", ""),
    ("0", "1", "1", ""),
    ("0", "2", "2", ""),
    ("0", "3", "3", ""),
    ("0", "3", "", "10"),
    ("1", "4", "4", ""),
    ("1", "5", "5", ""),
    ("1", "6", "106", ""),
    ("1", "7", "107", ""),
    ("1", "7", "", "20"),
]
"""(epoch, step, loss, val_acc1) of two sittings merged: the second resumed at step 6 of epoch
1, so its rows from there replace the first's (losses 106, 107, not 6, 7)."""


def _merged(run_dir: Path, attempts: list[dict], last_folder: Path) -> list[tuple[str, ...]]:
    """The rows ``merge_metrics`` writes for ``attempts`` (the run's sittings)."""
    (run_dir / "pretrain_attempts.jsonl").write_text(
        "".join(json.dumps(a) + "\n" for a in attempts)
    )
    with open(merge_metrics(run_dir, str(last_folder), run_dir / "m.csv"), newline="") as f:
        return [(r["epoch"], r["step"], r["loss"], r["val_acc1"]) for r in csv.DictReader(f)]


def _sitting(folder: Path, rows: list[dict]) -> Path:
    folder.mkdir()
    with open(folder / "metrics.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=sorted({k for r in rows for k in r}))
        writer.writeheader()
        writer.writerows(rows)
    return folder


def test_a_sitting_resumed_within_an_epoch_keeps_the_steps_its_checkpoint_trained(tmp_path):
    # 4 steps an epoch; the first sitting's newest checkpoint: epoch 1 after 2 of its steps
    # (global step 6); it trained step 6 too before it was killed: that step is trained again
    steps = [{"epoch": 0, "step": s, "loss": s} for s in range(4)]
    first = _sitting(
        tmp_path / "a",
        [
            *steps,
            {"epoch": 0, "step": 3, "val_acc1": 10},
            *({"epoch": 1, "step": s, "loss": s} for s in (4, 5, 6)),
        ],
    )
    second = _sitting(
        tmp_path / "b",
        [
            *({"epoch": 1, "step": s, "loss": 100 + s} for s in (6, 7)),
            {"epoch": 1, "step": 7, "val_acc1": 20},
        ],
    )
    attempts = [
        {"folder": str(first), "resumed_from": None, "start_epoch": 0, "start_step": 0},
        {
            "folder": str(second),
            "resumed_from": str(first / "x-ep=1-step=6.ckpt"),
            "start_epoch": 1,
            "start_step": 6,
        },
    ]
    assert _merged(tmp_path, attempts, second) == MERGED


def test_an_epoch_resumed_part_way_through_counts_for_the_share_it_trained(tmp_path):
    pytest.importorskip("lightning")
    from solo_bayesncl.benchmark.callbacks import EpochTimer

    # the checkpoint: within epoch 2 (of 20 batches), after 12 of its batches
    loops = {
        "fit_loop": {
            "epoch_progress": {"current": {"ready": 3, "processed": 2}},
            "epoch_loop.batch_progress": {"current": {"processed": 12}},
        }
    }
    ckpt = tmp_path / "run-ep=2-step=52.ckpt"
    torch.save({"epoch": 2, "global_step": 52, "loops": loops}, ckpt)
    (tmp_path / "pretrain_epoch_times.json").write_text(
        json.dumps({"0": {"wall_s": 30.0, "cpu_s": 50.0}, "1": {"wall_s": 32.0, "cpu_s": 52.0}})
    )
    timer = EpochTimer(tmp_path, "pretrain")
    trainer = SimpleNamespace(ckpt_path=str(ckpt), current_epoch=2, num_training_batches=20)
    timer.on_train_start(trainer, None)
    for epoch in (2, 3):
        trainer.current_epoch = epoch
        timer.on_train_epoch_start(trainer, None)
        timer.on_train_epoch_end(trainer, None)
    times = json.loads((tmp_path / "pretrain_epoch_times.json").read_text())
    assert [times[e].get("share", 1.0) for e in ("0", "1", "2", "3")] == [1.0, 1.0, 0.4, 1.0]
    walls = sum(times[e]["wall_s"] for e in times)
    assert epoch_timing(tmp_path, "pretrain", 4)["seconds_per_epoch"] == pytest.approx(walls / 3.4)
    assert timer.mean_wall_s() == pytest.approx(walls / 3.4)


def test_sittings_resumed_in_one_folder_are_read_from_its_one_metrics_csv(tmp_path):
    # the same two sittings as above, the second resumed in the first one's folder (appended)
    folder = _sitting(
        tmp_path / "a",
        [
            *({"epoch": 0, "step": s, "loss": s} for s in range(4)),
            {"epoch": 0, "step": 3, "val_acc1": 10},
            *({"epoch": 1, "step": s, "loss": s} for s in (4, 5, 6)),
            *({"epoch": 1, "step": s, "loss": 100 + s} for s in (6, 7)),
            {"epoch": 1, "step": 7, "val_acc1": 20},
        ],
    )
    attempts = [
        {
            "folder": str(folder),
            "rows_before": 0,
            "resumed_from": None,
            "start_epoch": 0,
            "start_step": 0,
        },
        {
            "folder": str(folder),
            "rows_before": 8,  # the first sitting's rows
            "resumed_from": str(folder / "x-ep=1-step=6.ckpt"),
            "start_epoch": 1,
            "start_step": 6,
        },
    ]
    assert _merged(tmp_path, attempts, folder) == MERGED
