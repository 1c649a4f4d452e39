"""Config resolution shared by the entry points: the steps every run takes before a model is
built, around solo-learn's own ``parse_cfg``."""

from __future__ import annotations

from collections.abc import Callable

import omegaconf
from omegaconf import OmegaConf

__all__ = ["resolve_with_solo"]


def resolve_with_solo(
    cfg: omegaconf.DictConfig,
    parse_cfg: Callable[[omegaconf.DictConfig], omegaconf.DictConfig],
    check_data: bool = True,
) -> omegaconf.DictConfig:
    """Machine settings, dataset mapping and early data checks, then solo-learn's ``parse_cfg``
    (pretraining's or linear evaluation's), then the plugin datasets' class counts."""
    from solo_bayesncl.data.datasets import (
        OFFLINE_DATASETS,
        check_dataset_available,
        resolve_dataset_cfg,
    )
    from solo_bayesncl.global_batch import apply_global_batch
    from solo_bayesncl.methods.config_checks import check_run_cfg
    from solo_bayesncl.runtime import resolve_runtime

    cfg = check_run_cfg(cfg)  # every value read as written, or refused, before anything else
    cfg = apply_global_batch(resolve_runtime(cfg))  # the paper's global batch on any machine
    cfg = resolve_dataset_cfg(cfg)
    if check_data:
        check_dataset_available(cfg)
    cfg = parse_cfg(cfg)
    offline = OmegaConf.select(cfg, "data.offline_dataset", default=None)
    if offline in OFFLINE_DATASETS:
        cfg.data.num_classes = OFFLINE_DATASETS[offline]
    return cfg
