"""A rerun whose earlier checkpoints are older than ``auto_resume.max_hours`` says which
checkpoint was too old and which setting decided, instead of starting a new run in silence."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import torch

from solo_bayesncl.training.auto_resume import find_resume_checkpoint

CFG = {"method": "ncl", "max_epochs": 2, "data": {"dataset": "cifar100"}}


def _earlier_run(run_root: Path, hours_ago: float) -> Path:
    folder = run_root / "abcd1234"
    folder.mkdir(parents=True)
    (folder / "args.json").write_text(json.dumps(CFG))
    ckpt = folder / "ncl-abcd1234-ep=0.ckpt"
    torch.save({"state_dict": {}, "epoch": 0, "global_step": 3}, ckpt)
    then = time.time() - hours_ago * 3600
    os.utime(ckpt, (then, then))
    return ckpt


def test_a_checkpoint_older_than_max_hours_is_named_with_the_setting(tmp_path):
    ckpt = _earlier_run(tmp_path, hours_ago=48)
    said: list[str] = []
    assert find_resume_checkpoint(CFG, tmp_path, max_hours=36, log=said.append) == (None, None)
    assert len(said) == 1
    assert said[0].startswith(f"auto-resume: not resuming from {ckpt}: saved 48.0 h ago, ")
    assert "older than auto_resume.max_hours=36; starting a new run" in said[0]


def test_a_checkpoint_within_max_hours_is_resumed(tmp_path):
    ckpt = _earlier_run(tmp_path, hours_ago=48)
    said: list[str] = []
    found = find_resume_checkpoint(CFG, tmp_path, max_hours=72, log=said.append)
    assert found == (ckpt, "abcd1234")
    assert said == [f"auto-resume: resuming the same run from {ckpt}"]
