"""``solo-bayesncl-linear`` / ``python main_linear.py``: linear evaluation from the command line.

    solo-bayesncl-linear "pretrained_feature_extractor='PATH.ckpt'"     # or python main_linear.py
    solo-bayesncl-linear "pretrained_feature_extractor='PATH.ckpt'" data.fraction=-1 max_epochs=10

A Hydra app on the shipped ``scripts/linear/cifar`` configs that runs
:func:`solo_bayesncl.training.linear.linear_eval`; the overrides given on the command line are
the keys the checkpoint's data settings do not replace.
"""

from __future__ import annotations

import omegaconf

from solo_bayesncl.cli.console import (
    hydra_entry_point,
    input_errors_until_fit,
    print_run_summary,
)
from solo_bayesncl.config.shipped import linear_config_dir

__all__ = ["main"]


def _run(cfg: omegaconf.DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig

    from solo_bayesncl.training.linear import linear_eval, prepare_linear_cfg

    explicit = list(HydraConfig.get().overrides.task)
    with input_errors_until_fit("solo-bayesncl-linear") as callbacks:
        prepared = prepare_linear_cfg(cfg, explicit)
        trainer = linear_eval(prepared[0], extra_callbacks=callbacks, prepared=prepared)
    print_run_summary(f"linear evaluation {prepared[0].name}", trainer)


def main() -> int:
    """``solo-bayesncl-linear`` / ``python main_linear.py``: Hydra overrides on ``sys.argv``."""
    return hydra_entry_point(_run, linear_config_dir("cifar"), "linear", "solo-bayesncl-linear")
