"""The small-image ResNet stem that solo-learn uses for CIFAR, for any dataset that asks for it.

solo-learn replaces a ResNet's first convolution by a 3x3 stride-1 one and drops the max-pool only
when ``data.dataset`` is ``cifar10``/``cifar100``. ``backbone.small_stem: True`` applies the same stem to any dataset, for any method.
"""

from __future__ import annotations

import omegaconf
from omegaconf import OmegaConf
from torch import nn

__all__ = ["apply_small_stem", "wants_small_stem"]


def wants_small_stem(cfg: omegaconf.DictConfig) -> bool:
    """True when the config asks for the small-image stem on a ResNet backbone."""
    name = str(OmegaConf.select(cfg, "backbone.name", default=""))
    return name.startswith("resnet") and bool(
        OmegaConf.select(cfg, "backbone.small_stem", default=False)
    )


def apply_small_stem(backbone: nn.Module) -> nn.Module:
    """Gives a torchvision-style ResNet a 3x3 stride-1 ``conv1`` and no max-pool, in place.

    A backbone that already has that stem (solo-learn's CIFAR models) is left as it is.
    """
    conv = backbone.conv1
    if conv.kernel_size != (3, 3) or conv.stride != (1, 1):
        backbone.conv1 = nn.Conv2d(
            3, conv.out_channels, kernel_size=3, stride=1, padding=2, bias=False
        )
    backbone.maxpool = nn.Identity()
    return backbone
