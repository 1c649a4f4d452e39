"""The published training recipe: every shipped config and benchmark preset trains with the
augmentations, projector and global batch of the official NCL/BayesNCL runs.

The expected values below are a table written by hand from the official configs; the files they
come from are named beside each table (both official repositories ship identical values)."""

from __future__ import annotations

import pytest
from helpers import REPO, compose
from omegaconf import OmegaConf

from solo_bayesncl.benchmark.presets import available_presets, load_preset

METHOD_FILES = ("simclr.yaml", "mocov2plus.yaml", "ncl.yaml", "bayesncl.yaml")

# github.com/Cui-Peng-624/BayesNCL and github.com/PKU-ML/non_neg:
#   scripts/pretrain/cifar/augmentations/symmetric.yaml (crop 32)
#   scripts/pretrain/imagenet-100/augmentations/symmetric.yaml (crop 224)
# The two datasets share every value but the crop size.
_OFFICIAL_VIEW = {
    "num_crops": 2,
    "rrc.enabled": True,
    "rrc.crop_min_scale": 0.08,
    "rrc.crop_max_scale": 1.0,
    "color_jitter.prob": 0.8,
    "color_jitter.brightness": 0.8,
    "color_jitter.contrast": 0.8,
    "color_jitter.saturation": 0.8,
    "color_jitter.hue": 0.2,
    "grayscale.prob": 0.2,
    "gaussian_blur.prob": 0.5,
    "solarization.prob": 0.0,
    "equalization.prob": 0.0,
    "horizontal_flip.prob": 0.5,
}
OFFICIAL_AUGMENTATIONS = {
    "scripts/pretrain/cifar": {**_OFFICIAL_VIEW, "crop_size": 32},
    "scripts/pretrain/imagenet-100": {**_OFFICIAL_VIEW, "crop_size": 224},
}


def _check_augmentations(cfg, expected: dict, where: str) -> None:
    pipelines = cfg.augmentations
    assert len(pipelines) == 1, f"{where}: one symmetric pipeline expected, got {len(pipelines)}"
    for key, value in expected.items():
        got = OmegaConf.select(pipelines[0], key)
        assert got == value, f"{where}: augmentations {key} is {got}, official value {value}"


@pytest.mark.parametrize("config_dir", sorted(OFFICIAL_AUGMENTATIONS))
@pytest.mark.parametrize("name", METHOD_FILES)
def test_shipped_configs_use_the_official_augmentations(config_dir, name):
    cfg = compose(config_dir, name)
    _check_augmentations(cfg, OFFICIAL_AUGMENTATIONS[config_dir], f"{config_dir}/{name}")


@pytest.mark.parametrize("preset_name", available_presets())
def test_every_preset_trains_with_the_official_augmentations(preset_name):
    preset = load_preset(preset_name)
    config_dir = str(preset.config_dir.relative_to(REPO))
    assert config_dir in OFFICIAL_AUGMENTATIONS, f"preset {preset_name}: unknown {config_dir}"
    for method in preset.methods:
        overrides = preset.run_overrides(method)  # a variant runs its method's config
        cfg = compose(config_dir, f"{preset.base_method(method)}.yaml", overrides)
        _check_augmentations(
            cfg, OFFICIAL_AUGMENTATIONS[config_dir], f"preset {preset_name}, {method}"
        )


# Official projector shapes (hidden, output), the same for SimCLR, NCL and BayesNCL:
#   scripts/pretrain/cifar/{simclr,ncl}.yaml -> 2048 / 256
#   scripts/pretrain/imagenet-100/{simclr,ncl}.yaml -> 16384 / 2048
OFFICIAL_PROJECTOR = {
    "scripts/pretrain/cifar": (2048, 256),
    "scripts/pretrain/imagenet-100": (16384, 2048),
}


@pytest.mark.parametrize("config_dir", sorted(OFFICIAL_PROJECTOR))
def test_four_methods_share_the_official_projector(config_dir):
    for name in METHOD_FILES:
        kw = compose(config_dir, name).method_kwargs
        shape = (kw.proj_hidden_dim, kw.proj_output_dim)
        assert shape == OFFICIAL_PROJECTOR[config_dir], f"{config_dir}/{name}: projector {shape}"
