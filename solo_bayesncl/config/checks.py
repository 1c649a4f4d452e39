"""The range checks of the keys every pretraining and linear run reads, before anything is
built (:func:`check_run_cfg`)."""

from __future__ import annotations

import math
from typing import Any

import omegaconf
from omegaconf import OmegaConf

from solo_bayesncl.core.validation import (
    parse_bool,
    require_fraction,
    require_int,
    require_range,
)

__all__ = ["check_run_cfg"]

#: Boolean keys of solo-learn's configs that entry points read with ``if``.
_RUN_BOOLEANS = (
    "wandb.enabled",
    "wandb.offline",
    "checkpoint.enabled",
    "auto_resume.enabled",
    "data.no_labels",
    "performance.disable_channel_last",
    "interpretability.enabled",
)


def _set(cfg: omegaconf.DictConfig, key: str, value: Any) -> None:
    OmegaConf.update(cfg, key, value, merge=False)


def check_run_cfg(cfg: omegaconf.DictConfig) -> omegaconf.DictConfig:
    """Range checks of the keys every pretraining and linear run reads, before anything is built.

    ``max_epochs`` >= 1, ``optimizer.batch_size`` >= 1, ``optimizer.lr`` > 0 and finite,
    ``optimizer.weight_decay`` >= 0, ``optimizer.classifier_lr`` > 0, ``data.num_workers`` >= 0,
    ``data.fraction`` and ``data.val_fraction`` in (0, 1] or -1, every crop size and crop count
    >= 1, ``checkpoint.frequency`` >= 1, and the booleans above parsed strictly. Values are
    written back normalised (``"false"`` becomes ``False``).
    """

    def present(key: str) -> Any:
        return OmegaConf.select(cfg, key, default=None, throw_on_missing=False)

    for key in ("max_epochs", "optimizer.batch_size", "checkpoint.frequency"):
        if present(key) is not None:
            _set(cfg, key, require_int(key, present(key), low=1))
    if present("data.num_workers") is not None:
        _set(
            cfg, "data.num_workers", require_int("data.num_workers", present("data.num_workers"), 0)
        )
    for key in ("optimizer.lr", "optimizer.classifier_lr"):
        if present(key) is not None:
            _set(cfg, key, require_range(key, present(key), low=0.0, high=math.inf))
    if present("optimizer.weight_decay") is not None:
        wd = require_range(
            "optimizer.weight_decay", present("optimizer.weight_decay"), 0.0, math.inf, True
        )
        _set(cfg, "optimizer.weight_decay", wd)
    for key in ("data.fraction", "data.val_fraction"):
        if present(key) is not None:
            _set(cfg, key, require_fraction(key, present(key)))
    for i, pipeline in enumerate(present("augmentations") or []):
        for name in ("crop_size", "num_crops"):
            if name in pipeline:
                pipeline[name] = require_int(f"augmentations[{i}].{name}", pipeline[name], low=1)
    if present("data.augmentations.crop_size") is not None:
        key = "data.augmentations.crop_size"
        _set(cfg, key, require_int(key, present(key), low=1))
    for key in _RUN_BOOLEANS:
        if present(key) is not None:
            _set(cfg, key, parse_bool(key, present(key)))
    return cfg
