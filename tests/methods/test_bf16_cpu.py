"""``precision=bf16-mixed`` on the CPU: a real pretraining step of each plugin method runs under
Lightning's bf16 autocast (the rows the loss reads are normalised under it, within
``core.losses``' tolerance) and gives finite losses."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("solo", reason="needs upstream solo-learn installed")

from helpers import compose, tiny_pretrain_overrides  # noqa: E402

from solo_bayesncl.training.pretrain import pretrain  # noqa: E402


@pytest.mark.solo
@pytest.mark.parametrize("config", ["bayesncl.yaml", "ncl.yaml"])
def test_a_bf16_mixed_step_on_the_cpu_runs_with_a_finite_loss(config, image_folder, tmp_path):
    cfg = compose(
        "scripts/pretrain/cifar",
        config,
        [
            *tiny_pretrain_overrides(image_folder, tmp_path / "out"),
            "precision=bf16-mixed",
            "wandb.enabled=False",
            "++limit_train_batches=1",
            "++limit_val_batches=0",
            "++num_sanity_val_steps=0",
            "++enable_progress_bar=False",
        ],
    )
    trainer = pretrain(cfg)
    assert trainer.precision == "bf16-mixed"
    assert trainer.global_step == 1
    logged = trainer.callback_metrics
    for key in ("train_loss", "train_nce_loss"):
        assert math.isfinite(float(logged[key])), (key, logged)
