"""Building a solo-learn method or a bare backbone from a run's spec, with the small-image stem.

solo-learn uses the CIFAR stem (3x3 stride-1 first convolution, no max-pool) only for
``cifar10``/``cifar100``; ``backbone.small_stem: True`` asks for it on any dataset.
:func:`build_method` and :func:`build_backbone` are the one place each that builds a method or a
bare backbone, so the stem rule cannot drift. :func:`without_resume_warning` drops solo-learn's
"might generate issues when resuming a checkpoint" log record for models that resume nothing.
"""

from __future__ import annotations

import contextlib
import copy
import logging
from collections.abc import Iterator, Mapping
from typing import Any

import omegaconf
from torch import nn

from solo_bayesncl.host.registration import register

__all__ = [
    "build_backbone",
    "build_method",
    "without_resume_warning",
]

RESUME_WARNING = "might generate issues when resuming a checkpoint"
"""The end of solo-learn's warning about a per-step scheduler (``solo/methods/base.py``)."""


def _not_the_resume_warning(record: logging.LogRecord) -> bool:
    return not (
        record.name == "root"
        and record.levelno == logging.WARNING
        and record.getMessage().startswith("Using scheduler_interval=")
        and record.getMessage().endswith(RESUME_WARNING + ".")
    )


@contextlib.contextmanager
def without_resume_warning() -> Iterator[None]:
    """Drops solo-learn's per-step scheduler warning (:data:`RESUME_WARNING`) from the root
    logger inside the block, and nothing else; for models that resume nothing."""
    root = logging.getLogger()
    root.addFilter(_not_the_resume_warning)
    try:
        yield
    finally:
        root.removeFilter(_not_the_resume_warning)


def apply_small_stem(backbone: nn.Module) -> nn.Module:
    """Gives a torchvision-style ResNet a 3x3 stride-1 ``conv1`` and no max-pool, in place."""
    conv = backbone.conv1
    if conv.kernel_size != (3, 3) or conv.stride != (1, 1):
        backbone.conv1 = nn.Conv2d(
            3, conv.out_channels, kernel_size=3, stride=1, padding=2, bias=False
        )
    backbone.maxpool = nn.Identity()
    return backbone


def build_method(
    name: str,
    solo_cfg: omegaconf.DictConfig,
    small_stem: bool,
    fresh_config: bool = False,
    settings: Any = None,
) -> nn.Module:
    """The method ``name`` from solo-learn's registry, freshly initialised from its config (a copy
    with ``fresh_config``), with the ResNet ``small_stem`` when asked (the momentum backbone too,
    re-synchronised); a plugin method takes the spec's parsed ``settings`` when given."""
    register()
    from solo.methods import METHODS

    cfg = copy.deepcopy(solo_cfg) if fresh_config else solo_cfg
    model = METHODS[name](cfg) if settings is None else METHODS[name](cfg, settings)
    if small_stem:
        apply_small_stem(model.backbone)
        if hasattr(model, "momentum_backbone"):
            apply_small_stem(model.momentum_backbone)
            model.momentum_backbone.load_state_dict(model.backbone.state_dict())
    return model


def build_backbone(
    name: str | None, method: str, kwargs: Mapping[str, Any], small_stem: bool
) -> nn.Module:
    """The bare backbone ``name`` (with ``backbone.kwargs``) of ``method``, head removed, with the
    ResNet ``small_stem`` when asked; ValueError for an unknown backbone."""
    from solo.methods.base import BaseMethod

    if name not in BaseMethod._BACKBONES:
        raise ValueError(
            f"backbone.name={name!r} is not one of solo-learn's: {', '.join(BaseMethod._BACKBONES)}"
        )
    backbone = BaseMethod._BACKBONES[name](method, **kwargs)
    if name.startswith("resnet"):
        backbone.fc = nn.Identity()
        if small_stem:
            apply_small_stem(backbone)
    return backbone
