"""The normalisation of a config's images, from one place: the mean and std solo-learn's
pretraining views use (:func:`solo_normalization`), which every pipeline and evaluation reads, so
that the linear probe, kNN, the report and the callback feed the backbone what it was trained on.
"""

from __future__ import annotations

from collections.abc import Sequence

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
    dataset: str, mean: Sequence[float] | None = None, std: Sequence[float] | None = None
) -> tuple[list[float], list[float]]:
    """The mean and std solo-learn's ``build_transform_pipeline`` normalises views of
    ``dataset`` (``data.dataset`` as solo-learn reads it) with: its table for the datasets it
    knows (CIFAR-10, CIFAR-100, STL-10, ImageNet), ``mean``/``std`` otherwise (the augmentation
    pipeline's, as :class:`~solo_bayesncl.data.names.DatasetSpec` holds them; ImageNet's when
    None).

    The one place every pipeline and evaluation reads its normalisation from. Only the dataset
    and ``mean``/``std`` matter: solo-learn is asked with every augmentation switched off.
    """
    from solo.data.pretrain_dataloader import build_transform_pipeline

    node = OmegaConf.create(_NO_AUGMENTATION)
    for key, values in (("mean", mean), ("std", std)):
        if values is not None:
            node[key] = [float(v) for v in values]
    for t in build_transform_pipeline(str(dataset), node).transforms:
        if isinstance(t, transforms.Normalize):
            return [float(v) for v in t.mean], [float(v) for v in t.std]
    raise RuntimeError("solo-learn's augmentation pipeline has no Normalize step")
