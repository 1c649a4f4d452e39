"""Auto-resume picks the checkpoint furthest on, an interval one within an epoch included, skips
one cut short by a kill, and reads where a checkpoint stands from Lightning's counters."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from solo_bayesncl.training.auto_resume import (
    ResumePoint,
    checkpoint_position,
    find_resume_checkpoint,
    read_position,
    resume_order,
)

ARGS = {"name": "run", "method": "bayesncl", "seed": 5, "optimizer": {"lr": 0.4}}


def _loops(epochs_ready: int, epochs_processed: int, batches: int) -> dict:
    """The counters Lightning 2.1 saves (only those read here)."""
    return {
        "fit_loop": {
            "epoch_progress": {
                "current": {"ready": epochs_ready, "processed": epochs_processed},
            },
            "epoch_loop.batch_progress": {"current": {"processed": batches}},
        }
    }


def _save(path: Path, step: int, loops: dict | None, epoch: int = 0, cut: bool = False) -> Path:
    ckpt = {"state_dict": {"w": torch.zeros(2)}, "epoch": epoch, "global_step": step}
    if loops is not None:
        ckpt["loops"] = loops
    torch.save(ckpt, path)
    if cut:  # killed while writing
        path.write_bytes(path.read_bytes()[:30])
    return path


def _sitting(root: Path, version: str) -> Path:
    folder = root / version
    folder.mkdir(parents=True)
    (folder / "args.json").write_text(json.dumps({**ARGS, "wandb_run_id": version}))
    return folder


def test_the_end_of_an_epoch_comes_after_its_steps_and_before_the_next_epochs(tmp_path):
    names = ["r-ep=2.ckpt", "r-ep=3-step=70.ckpt", "r-ep=2-step=60.ckpt", "r-ep=3.ckpt"]
    paths = [tmp_path / n for n in names]
    for p in paths:
        p.write_bytes(b"")
    order = [p.name for p in resume_order(paths)]
    assert order == ["r-ep=3.ckpt", "r-ep=3-step=70.ckpt", "r-ep=2.ckpt", "r-ep=2-step=60.ckpt"]


def test_a_newer_interval_checkpoint_wins_and_one_cut_short_is_skipped(tmp_path):
    root = tmp_path / "bayesncl"
    first = _sitting(root, "offline-a")
    _save(first / "run-offline-a-ep=1.ckpt", 40, _loops(2, 2, 20), epoch=1)
    within = _save(first / "run-offline-a-ep=2-step=52.ckpt", 52, _loops(3, 2, 12), epoch=2)
    lines: list[str] = []
    found, _ = find_resume_checkpoint(ARGS, root, log=lines.append)
    assert found == within
    assert lines == [f"auto-resume: resuming the same run from {within}"]

    # a later sitting (resumed from it) was killed while writing its next interval checkpoint
    second = _sitting(root, "offline-b")
    cut = _save(second / "run-offline-b-ep=2-step=60.ckpt", 60, _loops(3, 2, 20), 2, cut=True)
    lines.clear()
    found, _ = find_resume_checkpoint(ARGS, root, log=lines.append)
    assert found == within
    assert lines[0].startswith(f"auto-resume: skipping unreadable checkpoint {cut} (")
    assert lines[1] == f"auto-resume: resuming the same run from {within}"


def test_the_position_of_a_checkpoint_comes_from_lightnings_counters(tmp_path):
    # saved by solo-learn's Checkpointer at the end of epoch 1 (0-based): 2 epochs finished
    assert checkpoint_position({"epoch": 1, "global_step": 40, "loops": _loops(2, 2, 20)}) == (
        ResumePoint(epoch=2, step=40, batch=0)
    )
    # saved within epoch 2 after 12 of its batches
    within = {"epoch": 2, "global_step": 52, "loops": _loops(3, 2, 12)}
    assert checkpoint_position(within) == ResumePoint(epoch=2, step=52, batch=12)
    assert checkpoint_position(within).phrase() == "epoch 2, step 52"
    # a checkpoint without Lightning's counters: saved at the end of its epoch
    assert checkpoint_position({"epoch": 4, "global_step": 9}) == ResumePoint(5, 9, 0)
    path = _save(tmp_path / "x-ep=2-step=52.ckpt", 52, _loops(3, 2, 12), epoch=2)
    assert read_position(path) == ResumePoint(2, 52, 12)
    assert read_position(_save(tmp_path / "cut.ckpt", 1, None, cut=True)) is None


@pytest.mark.parametrize("world", [1, 2])
def test_one_line_says_where_a_run_resumed(world):
    pytest.importorskip("lightning")
    from solo_bayesncl.training.auto_resume import JobRun
    from solo_bayesncl.training.trainer import resume_line

    resumed = JobRun("ab12cd34", "/ck/run-ep=2-step=52.ckpt", "f" * 16)
    line = resume_line(resumed, ResumePoint(2, 52, 12), world)
    expected = "resumed from epoch 2, step 52 (/ck/run-ep=2-step=52.ckpt)"
    assert line == (expected if world == 1 else f"run ab12cd34: the 2 processes {expected}")
    new = JobRun("ab12cd34", None, "f" * 16)
    assert resume_line(new, None, world) == (
        None if world == 1 else "run ab12cd34: the 2 processes start it"
    )
