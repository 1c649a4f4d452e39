"""timm builds solo-learn's ViTs and Swins for one input size (224 px unless ``img_size`` says
otherwise): a pretraining gives them the crop size, says so once, and refuses a size the crops do
not have before a model is built. A tiny BayesNCL run with ``vit_tiny`` at 32 px trains, and its
checkpoint's backbone is rebuilt at that size."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import compose, tiny_pretrain_overrides
from omegaconf import OmegaConf

from solo_bayesncl.config.checks import fit_backbone_to_crops
from solo_bayesncl.core.validation import ConfigError

pytestmark = pytest.mark.solo


def _cfg(name: str, crops: list[int], img_size: int | None = None):
    backbone: dict = {"name": name}
    if img_size is not None:
        backbone["kwargs"] = {"img_size": img_size}
    pipelines = [{"crop_size": c} for c in crops]
    return OmegaConf.create({"backbone": backbone, "augmentations": pipelines})


@pytest.mark.parametrize("name", ["vit_tiny", "vit_small", "vit_base", "vit_large", "swin_tiny"])
def test_a_sized_backbone_gets_the_crop_size_and_says_so(name, capsys):
    cfg = _cfg(name, [32, 32])
    fit_backbone_to_crops(cfg)
    assert cfg.backbone.kwargs.img_size == 32
    assert capsys.readouterr().out == (
        f"backbone.kwargs.img_size=32: {name} is built for the 32 px crops\n"
    )


def test_other_backbones_and_a_matching_size_are_left_alone(capsys):
    for cfg in (_cfg("resnet18", [32]), _cfg("convnext_tiny", [32]), _cfg("vit_tiny", [32], 32)):
        before = OmegaConf.to_container(cfg)
        fit_backbone_to_crops(cfg)
        assert OmegaConf.to_container(cfg) == before
    assert capsys.readouterr().out == ""


def test_a_size_the_crops_do_not_have_names_the_override():
    with pytest.raises(ConfigError) as err:
        fit_backbone_to_crops(_cfg("vit_tiny", [32], 224))
    assert str(err.value) == (
        "backbone.kwargs.img_size=224, but the augmentations crop 32 px and vit_tiny takes only "
        "its img_size: set ++backbone.kwargs.img_size=32 (or remove it, and the crop size is taken)"
    )
    with pytest.raises(ConfigError, match="the augmentations crop 32 and 96 px: give every"):
        fit_backbone_to_crops(_cfg("swin_tiny", [32, 96]))


def test_the_refusal_comes_before_a_model_is_built(image_folder, tmp_path, monkeypatch):
    from solo_bayesncl.host import models
    from solo_bayesncl.training.pretrain import pretrain

    monkeypatch.setattr(models, "build_method", lambda *a, **k: pytest.fail("a model was built"))
    cfg = compose(
        "scripts/pretrain/cifar",
        "bayesncl.yaml",
        [
            *tiny_pretrain_overrides(image_folder, tmp_path),
            "backbone.name=vit_tiny",
            "++backbone.kwargs.img_size=224",
        ],
    )
    with pytest.raises(ConfigError, match=r"set \+\+backbone.kwargs.img_size=32"):
        pretrain(cfg)
    assert not any(Path(tmp_path).iterdir())


def test_bayesncl_trains_a_vit_tiny_at_32_px_and_its_backbone_loads(image_folder, tmp_path):
    from solo_bayesncl.io.checkpoints import load_backbone, load_checkpoint
    from solo_bayesncl.training.pretrain import pretrain

    cfg = compose(
        "scripts/pretrain/cifar",
        "bayesncl.yaml",
        [*tiny_pretrain_overrides(image_folder, tmp_path), "backbone.name=vit_tiny"],
    )
    trainer = pretrain(cfg)
    assert trainer.state.finished and trainer.global_step > 0
    checkpoint = next(Path(tmp_path).rglob("*.ckpt"))
    loaded = load_checkpoint(checkpoint)
    assert loaded.spec.method.backbone_kwargs == {"img_size": 32}
    backbone = load_backbone(loaded)
    with torch.no_grad():
        features = backbone(torch.zeros(2, 3, 32, 32))
    assert features.shape == (2, 192) and torch.isfinite(features).all()
