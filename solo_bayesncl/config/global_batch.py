"""A global batch that does not depend on the machine.

solo-learn reads ``optimizer.batch_size`` per device. With ``optimizer.batch_size_scope: global``
(the shipped configs) it is the global batch, split evenly over the processes before solo-learn
sees it, so batch and learning rate are the papers' on any number of devices (an uneven split is
refused); ``per_device`` (the default) keeps solo-learn's meaning.
"""

from __future__ import annotations

import omegaconf
from omegaconf import OmegaConf

from solo_bayesncl.config.runtime import job_processes

__all__ = ["BATCH_SCOPES", "apply_global_batch", "plan_global_batch"]

BATCH_SCOPES: tuple[str, ...] = ("global", "per_device")


def plan_global_batch(global_batch: int, world_size: int) -> int:
    """The batch of each of ``world_size`` processes, ``global_batch`` split evenly; raises
    ValueError for a non-positive size, or a global batch that ``world_size`` does not divide."""
    if isinstance(global_batch, bool) or not isinstance(global_batch, int) or global_batch < 1:
        raise ValueError(f"optimizer.batch_size={global_batch!r} must be a positive integer")
    if world_size < 1:
        raise ValueError(f"the number of processes must be >= 1, got {world_size}")
    if global_batch % world_size:
        raise ValueError(
            f"optimizer.batch_size={global_batch} is the global batch "
            f"(optimizer.batch_size_scope=global) and does not split evenly over {world_size} "
            "processes (devices x num_nodes); use a device count that divides it, or set "
            "optimizer.batch_size_scope=per_device to give solo-learn a per-device batch"
        )
    return global_batch // world_size


def apply_global_batch(cfg: omegaconf.DictConfig) -> omegaconf.DictConfig:
    """Turns a global ``optimizer.batch_size`` into solo-learn's per-device one, in place (after
    :func:`~solo_bayesncl.config.runtime.resolve_runtime`, before ``parse_cfg``); records
    ``optimizer.global_batch_size`` and sets the scope to ``per_device`` (idempotent)."""
    scope = str(OmegaConf.select(cfg, "optimizer.batch_size_scope", default="per_device"))
    if scope not in BATCH_SCOPES:
        raise ValueError(
            f"optimizer.batch_size_scope={scope!r} is not supported; allowed values: "
            f"{', '.join(BATCH_SCOPES)}"
        )
    if scope == "per_device":
        return cfg
    batch = OmegaConf.select(cfg, "optimizer.batch_size")
    cfg.optimizer.batch_size = plan_global_batch(batch, job_processes(cfg))
    cfg.optimizer.global_batch_size = batch
    cfg.optimizer.batch_size_scope = "per_device"
    return cfg
