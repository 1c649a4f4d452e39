"""The paper's global batch and learning rate on any number of devices (no GPU needed: the
arithmetic is pure, and solo-learn's own ``parse_cfg`` is run on CPU configs with 1, 2, 4 devices)."""

from __future__ import annotations

import pytest
from helpers import compose
from omegaconf import OmegaConf

from solo_bayesncl.config.global_batch import apply_global_batch, plan_global_batch

# (config dir, global batch, base lr, lr trained with) of the official one-GPU runs:
# scripts/pretrain/cifar/simclr.yaml (256, LARS 0.4) and scripts/pretrain/imagenet-100/simclr.yaml
# (128, LARS 0.3, which solo-learn's 128/256 factor turns into 0.15) in both official repos.
PAPER = [
    ("scripts/pretrain/cifar", 256, 0.4, 0.4),
    ("scripts/pretrain/imagenet-100", 128, 0.3, 0.15),
]


def solo_learn_lr(lr: float, per_device_batch: int, devices: int, num_nodes: int = 1) -> float:
    """The learning rate solo-learn's ``parse_cfg`` trains with: ``lr * b * devices * nodes / 256``."""
    return lr * per_device_batch * devices * num_nodes / 256


@pytest.mark.parametrize(("config_dir", "batch", "lr", "trained_lr"), PAPER)
@pytest.mark.parametrize("devices", [1, 2, 4])
def test_split_keeps_global_batch_and_lr(config_dir, batch, lr, trained_lr, devices):
    per_device = plan_global_batch(batch, devices)
    assert per_device * devices == batch and per_device == batch // devices
    assert solo_learn_lr(lr, per_device, devices) == pytest.approx(trained_lr)
    # without the split, solo-learn's per-device batch would multiply both by the device count
    assert solo_learn_lr(lr, batch, devices) == pytest.approx(trained_lr * devices)


def test_batch_that_does_not_split_is_refused():
    with pytest.raises(ValueError, match=r"batch_size=256 is the global batch .* 3 processes"):
        plan_global_batch(256, 3)
    with pytest.raises(ValueError, match="must be a positive integer"):
        plan_global_batch(0, 1)


def test_apply_on_a_config_is_idempotent_and_keeps_per_device_configs():
    cfg = OmegaConf.create(
        {"devices": [0, 1, 2, 3], "optimizer": {"batch_size": 256, "batch_size_scope": "global"}}
    )
    apply_global_batch(cfg)
    assert cfg.optimizer.batch_size == 64 and cfg.optimizer.global_batch_size == 256
    apply_global_batch(cfg)
    assert cfg.optimizer.batch_size == 64
    solo_cfg = OmegaConf.create({"devices": [0, 1], "optimizer": {"batch_size": 256}})
    assert apply_global_batch(solo_cfg).optimizer.batch_size == 256  # solo-learn's meaning
    bad = OmegaConf.create(
        {"devices": [0], "optimizer": {"batch_size": 8, "batch_size_scope": "x"}}
    )
    with pytest.raises(ValueError, match=r"batch_size_scope='x'.*global, per_device"):
        apply_global_batch(bad)


@pytest.mark.solo
@pytest.mark.parametrize(("config_dir", "batch", "lr", "trained_lr"), PAPER)
@pytest.mark.parametrize("devices", [1, 2, 4])
def test_shipped_configs_through_solo_learn(config_dir, batch, lr, trained_lr, devices):
    """solo-learn's own ``parse_cfg`` gives the paper's batch and lr on 1, 2 and 4 processes."""
    from solo_bayesncl.training.pretrain import prepare_pretrain

    overrides = ["accelerator=cpu", f"devices={devices}", "data.format=image_folder"]
    cfg = prepare_pretrain(compose(config_dir, "simclr.yaml", overrides), check_data=False).solo
    assert len(cfg.devices) == devices
    assert cfg.optimizer.batch_size * devices == batch == cfg.optimizer.global_batch_size
    assert cfg.optimizer.lr == pytest.approx(trained_lr)
    assert cfg.optimizer.classifier_lr == pytest.approx(0.1 * batch / 256)
