"""A run's identity is its training settings: the keys solo-learn adds for a loader the run does
not use (DALI's, when NVIDIA DALI is installed) never change it, a checkpoint of another
configuration in the run's folder is skipped with one line naming it, and a resumed run keeps
its folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from solo_bayesncl.training.auto_resume import (
    FINGERPRINT_KEY,
    config_differences,
    config_fingerprint,
    decide_job_run,
    find_resume_checkpoint,
)

BASE = {
    "name": "run",
    "method": "bayesncl",
    "seed": 5,
    "data": {"dataset": "fashion-mnist", "format": "image_folder"},
    "optimizer": {"lr": 0.4},
}
#: What solo-learn's parse_cfg adds when DALI (and umap) are importable.
WITH_EXTRAS = {
    **BASE,
    "dali": {"device": "gpu", "encode_indexes_into_labels": False},
    "auto_umap": {"enabled": False, "dir": "auto_umap", "frequency": 1},
}
SHAPES = {"w": (2,)}


def test_installing_dali_or_umap_does_not_change_a_run_that_does_not_use_them():
    assert config_fingerprint(WITH_EXTRAS) == config_fingerprint(BASE)
    assert config_differences(BASE, WITH_EXTRAS) == []


def test_the_dali_keys_count_when_the_run_reads_its_images_with_dali():
    dali = {**WITH_EXTRAS, "data": {**BASE["data"], "format": "dali"}}
    other = {**dali, "dali": {"device": "cpu", "encode_indexes_into_labels": False}}
    assert config_fingerprint(dali) != config_fingerprint(other)
    assert config_differences(dali, other) == [("dali.device", "gpu", "cpu")]


def _sitting(root: Path, version: str, args: dict) -> Path:
    folder = root / version
    folder.mkdir(parents=True)
    (folder / "args.json").write_text(json.dumps({**args, "wandb_run_id": version}))
    return folder


def _save(path: Path, epoch: int, fingerprint: str | None, shape=(2,)) -> Path:
    ckpt = {"state_dict": {"w": torch.zeros(shape)}, "epoch": epoch, "global_step": 10 * epoch}
    if fingerprint is not None:
        ckpt[FINGERPRINT_KEY] = fingerprint
    torch.save(ckpt, path)
    return path


def test_a_checkpoint_of_another_configuration_in_the_folder_is_skipped_by_name(tmp_path):
    root = tmp_path / "bayesncl"
    folder = _sitting(root, "offline-a", WITH_EXTRAS)
    mine = _save(folder / "run-offline-a-ep=0.ckpt", 0, config_fingerprint(BASE))
    foreign = _save(folder / "run-offline-a-ep=3.ckpt", 3, "0123456789abcdef")
    reshaped = _save(folder / "run-offline-a-ep=2.ckpt", 2, None, shape=(5,))
    lines: list[str] = []
    ckpt, run_id = find_resume_checkpoint(BASE, root, log=lines.append, shapes=SHAPES)
    assert ckpt == mine
    assert run_id == "a"
    assert lines[0] == (
        f"auto-resume: skipping checkpoint {foreign}: saved by a run of another configuration "
        f"(fingerprint 0123456789abcdef, this run's {config_fingerprint(BASE)})"
    )
    assert lines[1].startswith(f"auto-resume: skipping checkpoint {reshaped}: weights of another")
    assert lines[2] == f"auto-resume: resuming the same run from {mine}"


def test_a_resumed_offline_run_continues_in_its_own_folder(tmp_path):
    root = tmp_path / "bayesncl"
    folder = _sitting(root, "offline-b4f7b473", BASE)
    _save(folder / "run-offline-b4f7b473-ep=0-step=8.ckpt", 0, config_fingerprint(BASE))
    run = decide_job_run(BASE, root, resume=True, log=lambda _: None, shapes=SHAPES)
    assert run.ckpt_path is not None and Path(run.ckpt_path).parent == folder
    assert f"offline-{run.run_id}" == folder.name  # the CSV logger's and Checkpointer's folder


@pytest.mark.solo  # needs Lightning, installed with solo-learn
def test_a_resumed_run_appends_to_its_metrics_csv_under_the_same_columns(tmp_path):
    import csv

    from omegaconf import OmegaConf

    from solo_bayesncl.config.settings import run_spec
    from solo_bayesncl.training.auto_resume import JobRun
    from solo_bayesncl.training.trainer import build_loggers

    cfg = run_spec(OmegaConf.create({"wandb": {"enabled": False}, "name": "run"})).trainer
    run = JobRun("b4f7b473", None, "f")
    (first,) = build_loggers(cfg, tmp_path, run)
    first.log_metrics({"train_loss": 1.0, "epoch": 0}, step=0)
    first.log_metrics({"val_acc1": 50.0, "epoch": 0}, step=1)
    first.save()
    (second,) = build_loggers(cfg, tmp_path, JobRun("b4f7b473", "x.ckpt", "f"))
    assert second.log_dir == first.log_dir  # the same folder
    second.log_metrics({"epoch": 1, "train_loss": 0.5}, step=2)  # another order, fewer columns
    second.log_metrics({"epoch": 1, "lr": 0.1}, step=3)  # a new column
    second.save()
    with open(tmp_path / "offline-b4f7b473" / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["step"], r["epoch"], r["train_loss"], r["val_acc1"], r["lr"]) for r in rows] == [
        ("0", "0", "1.0", "", ""),
        ("1", "0", "", "50.0", ""),
        ("2", "1", "0.5", "", ""),
        ("3", "1", "", "", "0.1"),
    ]


@pytest.mark.solo  # Lightning's CSVLogger
def test_the_summary_names_this_runs_checkpoint_never_a_foreign_one_in_its_folder(tmp_path):
    """The foreign checkpoint auto-resume skipped is further on by its name (ep=9); the summary
    still names the one the run resumed from, then the one it saved."""
    from types import SimpleNamespace

    from lightning.pytorch.loggers import CSVLogger

    from solo_bayesncl.training.summary import run_summary

    logger = CSVLogger(tmp_path, name="bayesncl", version="offline-abc")
    folder = Path(logger.log_dir)
    folder.mkdir(parents=True)
    resumed = folder / "bayesncl-offline-abc-ep=1.ckpt"
    (folder / "zz-foreign-ep=9.ckpt").write_bytes(b"another configuration's")
    resumed.write_bytes(b"this run's")
    checkpointer = SimpleNamespace(last_ckpt=None)
    trainer = SimpleNamespace(
        loggers=[logger],
        callbacks=[checkpointer],
        ckpt_path=str(resumed),
        interrupted=False,
        current_epoch=2,
        global_step=8,
        callback_metrics={},
    )
    assert run_summary(trainer)["checkpoint"] == str(resumed)
    saved = folder / "bayesncl-offline-abc-ep=2.ckpt"
    saved.write_bytes(b"this run's, saved by this fit")
    checkpointer.last_ckpt = str(saved)
    assert run_summary(trainer)["checkpoint"] == str(saved)
