"""``solo-bayesncl-pretrain`` / ``python main_pretrain.py``: pretraining from the command line.

A Hydra app on the shipped ``scripts/pretrain/cifar`` configs (``--config-path`` picks another,
e.g. ``scripts/pretrain/imagenet-100``) that runs :func:`solo_bayesncl.training.pretrain.pretrain`.
"""

from __future__ import annotations

import omegaconf

from solo_bayesncl.cli.console import (
    hydra_entry_point,
    input_errors_until_fit,
    print_run_summary,
)
from solo_bayesncl.config.shipped import pretrain_config_dir

__all__ = ["main"]


def _run(cfg: omegaconf.DictConfig) -> None:
    from solo_bayesncl.training.pretrain import prepare_pretrain_cfg, pretrain

    with input_errors_until_fit("solo-bayesncl-pretrain") as callbacks:
        cfg = prepare_pretrain_cfg(cfg)
        trainer = pretrain(cfg, extra_callbacks=callbacks, prepared=True)
    print_run_summary(f"pretraining {cfg.name}", trainer)


def main() -> int:
    """``solo-bayesncl-pretrain`` / ``python main_pretrain.py``: Hydra overrides on ``sys.argv``."""
    return hydra_entry_point(
        _run, pretrain_config_dir("cifar"), "bayesncl", "solo-bayesncl-pretrain"
    )
