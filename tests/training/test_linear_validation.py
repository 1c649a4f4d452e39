"""The linear probe trains the same whether it validates every epoch or only after the last: its
validation draws nothing from the random stream of its training epochs."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from helpers import compose, image_folder_overrides, untrained_checkpoint

solo = pytest.mark.solo


def _probe(ckpt: Path, image_folder: Path, out: Path, extra: list[str]) -> list[dict[str, str]]:
    """Trains a 3-epoch probe on ``ckpt`` (one process, no loader workers: deterministic on the
    CPU); returns the rows of its ``metrics.csv`` that hold a validation figure."""
    from solo_bayesncl.training.linear import linear_eval

    cfg = compose(
        "scripts/linear/cifar",
        "linear_sgd.yaml",
        [
            f"pretrained_feature_extractor='{ckpt}'",
            *image_folder_overrides(image_folder),
            "data.num_workers=0",
            "optimizer.batch_size=8",
            "max_epochs=3",
            "scheduler.lr_decay_steps=[1,2]",
            "seed=3",
            f"checkpoint.dir={out}",
            "checkpoint.enabled=False",
            "wandb.enabled=False",
            "++enable_progress_bar=False",
            "accelerator=cpu",
            "devices=1",
            *extra,
        ],
    )
    linear_eval(cfg)
    (metrics,) = list((out / "linear").glob("*/metrics.csv"))
    with open(metrics, newline="") as f:
        return [row for row in csv.DictReader(f) if row.get("val_acc1")]


@solo
def test_validating_only_after_the_last_epoch_gives_the_same_probe(image_folder, tmp_path):
    ckpt = untrained_checkpoint(tmp_path / "ckpt", "ncl.yaml", image_folder, 32, 16)
    every = _probe(ckpt, image_folder, tmp_path / "every", [])
    last = _probe(
        ckpt,
        image_folder,
        tmp_path / "last",
        ["++check_val_every_n_epoch=3", "++num_sanity_val_steps=0"],
    )
    assert [row["epoch"] for row in every] == ["0", "1", "2"]
    assert [row["epoch"] for row in last] == ["2"]  # one validation, after the last epoch
    # the same training: the same loss and accuracies after it, to the last digit logged
    for key in ("val_loss", "val_acc1", "val_acc5"):
        assert last[0][key] == every[-1][key], key
