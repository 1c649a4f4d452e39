"""A linear evaluation's config resolved against the checkpoint it probes: the data the backbone
was trained on taken over (:func:`inherit_from_checkpoint`), the backbone and the pretraining
method written in, and ``probe`` checked (:data:`PROBES`), before solo-learn's ``parse_cfg``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import omegaconf
from omegaconf import OmegaConf

from solo_bayesncl.data.names import DatasetSpec

__all__ = ["PROBES", "check_probe", "inherit_from_checkpoint", "linear_cfg", "pretrained_path"]

PROBES: tuple[str, ...] = ("standard", "official")
"""``probe`` values: the transforms of the linear probe (see the module docstring)."""

_DATASET_KEYS = (
    ("data.train_path", "train_path"),
    ("data.val_path", "val_path"),
    ("data.fraction", "fraction"),
    ("data.val_fraction", "val_fraction"),
    ("data.num_backgrounds", "num_backgrounds"),
    ("data.background_seed", "background_seed"),
)
"""The data settings a linear evaluation takes from the checkpoint while it evaluates on the
checkpoint's dataset, with their :class:`~solo_bayesncl.data.names.DatasetSpec` field."""


def _given(key: str, explicit: set[str]) -> bool:
    return any(key == e or key.startswith(e + ".") for e in explicit)


def inherit_from_checkpoint(
    cfg: omegaconf.DictConfig, trained: DatasetSpec, explicit: Iterable[str] = ()
) -> omegaconf.DictConfig:
    """Takes the pretraining run's data settings (``trained``) into a linear config, except the
    keys in ``explicit``: most only while the dataset is the checkpoint's, the crop size always."""
    explicit = {k.split("=", 1)[0].lstrip("+~") for k in explicit}
    if trained.name and not _given("data.dataset", explicit):
        OmegaConf.update(cfg, "data.dataset", trained.name, force_add=True)
    same = str(OmegaConf.select(cfg, "data.dataset", default="")) == trained.name
    taken = {key: getattr(trained, name) for key, name in _DATASET_KEYS if same}
    taken["data.augmentations.crop_size"] = trained.crop_size
    if same:
        for key in ("mean", "std"):
            values = getattr(trained, key)
            taken[f"data.augmentations.{key}"] = None if values is None else list(values)
    for key, value in taken.items():
        if value is not None and not _given(key, explicit):
            OmegaConf.update(cfg, key, value, force_add=True)
    return cfg


def pretrained_path(cfg: omegaconf.DictConfig) -> str:
    """``pretrained_feature_extractor``: the checkpoint to probe; refused when missing."""
    OmegaConf.set_struct(cfg, False)
    path = OmegaConf.select(cfg, "pretrained_feature_extractor", default=None)
    if path in (None, "None", "???"):
        raise ValueError(
            "pretrained_feature_extractor is missing: give the path of a pretrained checkpoint"
        )
    return str(path)


def linear_cfg(
    cfg: omegaconf.DictConfig,
    trained: DatasetSpec,
    backbone: Mapping[str, Any],
    method: str,
    explicit: Iterable[str] = (),
) -> omegaconf.DictConfig:
    """The config with the checkpoint's data, ``backbone`` section and pretraining ``method``."""
    cfg = inherit_from_checkpoint(cfg, trained, explicit)
    cfg.backbone = OmegaConf.create(dict(backbone))
    cfg.pretrain_method = method
    return cfg


def check_probe(cfg: omegaconf.DictConfig) -> str:
    """``probe`` (left out: ``standard``), checked against :data:`PROBES` and written back."""
    probe = OmegaConf.select(cfg, "probe", default=None) or "standard"
    if probe not in PROBES:
        raise ValueError(f"probe={probe!r} is not supported; allowed values: {', '.join(PROBES)}")
    OmegaConf.update(cfg, "probe", probe, force_add=True)
    return probe
