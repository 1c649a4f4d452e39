"""Config resolution shared by the entry points: the steps every run takes before a model is
built, around solo-learn's own ``parse_cfg``."""

from __future__ import annotations

import re
from collections.abc import Callable

import omegaconf
from omegaconf import OmegaConf

__all__ = ["dataset_run_name", "resolve_with_solo"]

_DATASET_TOKENS = (
    "fashion-mnist",
    "imagenet-100",
    "imagenet100",
    "imagenet",
    "cifar100",
    "cifar10",
    "stl10",
    "custom",
)
_DATASET_IN_NAME = re.compile(
    r"(?<![A-Za-z0-9])(" + "|".join(map(re.escape, _DATASET_TOKENS)) + r")(?![A-Za-z0-9])"
)


def dataset_run_name(name: str, dataset: str) -> str:
    """The run name with the dataset actually trained on: the first dataset named in ``name``
    is replaced (``bayesncl-cifar100`` on Fashion-MNIST is ``bayesncl-fashion-mnist``), and a
    name that names none gets ``-<dataset>`` appended. Checkpoint files carry this name."""
    if _DATASET_IN_NAME.search(name):
        return _DATASET_IN_NAME.sub(dataset, name, count=1)
    return f"{name}-{dataset}"


def resolve_with_solo(
    cfg: omegaconf.DictConfig,
    parse_cfg: Callable[[omegaconf.DictConfig], omegaconf.DictConfig],
    check_data: bool = True,
) -> omegaconf.DictConfig:
    """Machine settings, dataset mapping and early data checks, then solo-learn's ``parse_cfg``
    (pretraining's or linear evaluation's), then the plugin datasets' class counts. The run name
    is made to say the dataset (:func:`dataset_run_name`)."""
    from solo_bayesncl.config.global_batch import apply_global_batch
    from solo_bayesncl.config.runtime import resolve_runtime
    from solo_bayesncl.core.validation import check_run_cfg
    from solo_bayesncl.data.datasets import (
        OFFLINE_DATASETS,
        check_dataset_available,
        resolve_dataset_cfg,
    )

    cfg = check_run_cfg(cfg)  # every value read as written, or refused, before anything else
    cfg = apply_global_batch(resolve_runtime(cfg))  # the paper's global batch on any machine
    cfg = resolve_dataset_cfg(cfg)
    dataset = OmegaConf.select(cfg, "data.offline_dataset", default=None) or cfg.data.dataset
    cfg.name = dataset_run_name(str(OmegaConf.select(cfg, "name", default=None) or "run"), dataset)
    if check_data:
        check_dataset_available(cfg)
    cfg = parse_cfg(cfg)
    offline = OmegaConf.select(cfg, "data.offline_dataset", default=None)
    if offline in OFFLINE_DATASETS:
        cfg.data.num_classes = OFFLINE_DATASETS[offline]
    return cfg
