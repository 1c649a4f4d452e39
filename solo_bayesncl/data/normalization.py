"""The normalisation of a config's images, from one place: the mean and std solo-learn's
pretraining views use (:func:`solo_normalization`), which every pipeline and evaluation reads, so
that the linear probe, kNN, the report and the callback feed the backbone what it was trained on.
"""

from __future__ import annotations

from typing import Any

import omegaconf
from omegaconf import OmegaConf
from torchvision import transforms

__all__ = ["solo_normalization"]

_NO_AUGMENTATION = {
    "crop_size": 1,
    "rrc": {"enabled": False},
    **{
        name: {"prob": 0.0}
        for name in (
            "color_jitter",
            "grayscale",
            "gaussian_blur",
            "solarization",
            "equalization",
            "horizontal_flip",
        )
    },
}


def solo_normalization(
    cfg: omegaconf.DictConfig, aug: Any = None
) -> tuple[list[float], list[float]]:
    """The mean and std solo-learn's ``build_transform_pipeline`` normalises views of
    ``cfg.data.dataset`` with: its table for the datasets it knows (CIFAR-10, CIFAR-100, STL-10,
    ImageNet), ``aug``'s ``mean``/``std`` otherwise (ImageNet's when absent).

    The one place every pipeline and evaluation reads its normalisation from. ``aug`` is an
    augmentation pipeline or a linear config's ``data.augmentations``; None reads the config's
    first pipeline, else its ``data.augmentations``. Only the dataset and ``aug``'s
    ``mean``/``std`` matter: solo-learn is asked with every augmentation switched off.
    """
    from solo.data.pretrain_dataloader import build_transform_pipeline

    if aug is None:
        pipelines = OmegaConf.select(cfg, "augmentations", default=None)
        aug = pipelines[0] if pipelines else OmegaConf.select(cfg, "data.augmentations")
    aug = aug or {}
    node = OmegaConf.create(_NO_AUGMENTATION)
    for key in ("mean", "std"):
        if aug.get(key, None) is not None:
            node[key] = [float(v) for v in aug[key]]
    for t in build_transform_pipeline(str(cfg.data.dataset), node).transforms:
        if isinstance(t, transforms.Normalize):
            return [float(v) for v in t.mean], [float(v) for v in t.std]
    raise RuntimeError("solo-learn's augmentation pipeline has no Normalize step")
