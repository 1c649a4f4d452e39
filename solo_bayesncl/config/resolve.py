"""Config resolution shared by the entry points: the steps every run takes before a model is
built, around solo-learn's own ``parse_cfg``."""

from __future__ import annotations

from collections.abc import Callable

import omegaconf
from omegaconf import OmegaConf

from solo_bayesncl.config.checks import check_run_cfg
from solo_bayesncl.config.global_batch import apply_global_batch
from solo_bayesncl.config.runtime import resolve_runtime
from solo_bayesncl.data.names import OFFLINE_DATASETS, dataset_run_name, dataset_spec
from solo_bayesncl.data.resolve import check_dataset_available, resolve_dataset_cfg

__all__ = ["resolve_with_solo"]


def resolve_with_solo(
    cfg: omegaconf.DictConfig,
    parse_cfg: Callable[[omegaconf.DictConfig], omegaconf.DictConfig],
    check_data: bool = True,
) -> omegaconf.DictConfig:
    """Machine settings, dataset mapping and early data checks, then solo-learn's ``parse_cfg``
    (pretraining's or linear evaluation's), then the plugin datasets' class counts. The run name
    is made to say the dataset (:func:`solo_bayesncl.data.names.dataset_run_name`)."""
    cfg = check_run_cfg(cfg)  # every value read as written, or refused, before anything else
    cfg = apply_global_batch(resolve_runtime(cfg))  # the paper's global batch on any machine
    cfg = resolve_dataset_cfg(cfg)
    name = str(OmegaConf.select(cfg, "name", default=None) or "run")
    dataset = dataset_spec(cfg).name
    cfg.name = dataset_run_name(name, dataset)
    if check_data:
        check_dataset_available(cfg)
    cfg = parse_cfg(cfg)
    if dataset in OFFLINE_DATASETS:
        cfg.data.num_classes = OFFLINE_DATASETS[dataset]
    return cfg
