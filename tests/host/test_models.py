"""One construction of methods and backbones: the small-stem rule is the same for pretraining,
checkpoint loading, linear evaluation and the zoo."""

from __future__ import annotations

import pytest
import torch
from torch import nn

pytest.importorskip("solo", reason="needs upstream solo-learn installed")

from helpers import compose  # noqa: E402

from solo_bayesncl.config.settings import run_spec  # noqa: E402
from solo_bayesncl.host.models import build_backbone, build_method  # noqa: E402
from solo_bayesncl.training.pretrain import prepare_pretrain  # noqa: E402


def _cfg(name: str, extra: list[str], image_folder):
    overrides = [
        f"data.train_path={image_folder / 'train'}",
        f"data.val_path={image_folder / 'val'}",
        "method_kwargs.proj_hidden_dim=32",
        "method_kwargs.proj_output_dim=16",
        "optimizer.batch_size=4",
        "accelerator=cpu",
    ]
    if name == "mocov2plus.yaml":
        overrides.append("method_kwargs.queue_size=64")
    return prepare_pretrain(
        compose("scripts/pretrain/cifar", name, overrides + extra), check_data=False
    ).solo


def _has_small_stem(backbone: nn.Module) -> bool:
    conv = backbone.conv1
    return (
        conv.kernel_size == (3, 3)
        and conv.stride == (1, 1)
        and isinstance(backbone.maxpool, nn.Identity)
    )


@pytest.mark.parametrize(
    ("extra", "small"),
    [
        (["data.dataset=custom"], False),
        (["data.dataset=custom", "+backbone.small_stem=True"], True),
        (["data.dataset=cifar100"], True),
    ],
)
@pytest.mark.parametrize("name", ["bayesncl.yaml", "mocov2plus.yaml"])
def test_method_and_backbone_follow_one_stem_rule(name, extra, small, image_folder):
    method = run_spec(_cfg(name, extra, image_folder)).method
    assert method.small_stem is small
    torch.manual_seed(0)
    model = build_method(method.name, _cfg(name, extra, image_folder), method.small_stem)
    backbone = build_backbone(
        method.backbone, method.name, method.backbone_kwargs, method.small_stem
    )
    assert _has_small_stem(model.backbone) is small
    assert _has_small_stem(backbone) is small
    method_shapes = {k: v.shape for k, v in model.backbone.state_dict().items()}
    assert {k: v.shape for k, v in backbone.state_dict().items()} == method_shapes
    if hasattr(model, "momentum_backbone"):
        assert _has_small_stem(model.momentum_backbone) is small
        for k, v in model.momentum_backbone.state_dict().items():
            assert torch.equal(v, model.backbone.state_dict()[k]), k


def test_unknown_backbone_is_named():
    with pytest.raises(ValueError, match="backbone.name='resnet7' is not one of solo-learn's"):
        build_backbone("resnet7", "ncl", {}, False)
