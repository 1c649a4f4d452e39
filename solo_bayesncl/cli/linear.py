"""``solo-bayesncl-linear`` / ``python main_linear.py``: a Hydra app on the shipped
``scripts/linear/cifar`` configs that runs :func:`solo_bayesncl.training.linear.linear_eval`; the
overrides given on the command line are the keys the checkpoint's data settings do not replace.
"""

from __future__ import annotations

import omegaconf

from solo_bayesncl.cli.console import (
    exit_if_interrupted,
    hydra_entry_point,
    input_errors_until_fit,
    print_run_summary,
)
from solo_bayesncl.cli.invocation import command_name
from solo_bayesncl.config.shipped import linear_config_dir

__all__ = ["COMMAND", "KEYS", "SUMMARY", "main"]

COMMAND = "solo-bayesncl-linear"  # the installed console script

SUMMARY = (
    "Linear evaluation of a pretrained checkpoint of any method: a linear classifier on its "
    "frozen backbone."
)
KEYS: tuple[tuple[str, str], ...] = (
    ("pretrained_feature_extractor", "the pretrained checkpoint (.ckpt) or zoo artifact; required"),
    ("data.dataset, data.train_path", "the probe's data; default: the checkpoint's (args.json)"),
    ("data.fraction", "share of the training set used, -1 all; default: the checkpoint's"),
    ("max_epochs", "epochs of the probe"),
    ("optimizer.batch_size", "the global batch, split over the devices"),
    ("optimizer.lr", "learning rate for a batch of 256 (scaled by batch/256)"),
    ("probe", "standard (the pretraining views' normalisation) or official (solo-learn's)"),
    ("data.num_workers", "data loader processes"),
    ("accelerator, devices, precision", "auto: every GPU with 16-mixed, else the CPU with fp32"),
    ("checkpoint.dir", "where the probe is written: <dir>/linear/<run>/"),
)


def _run(cfg: omegaconf.DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig

    from solo_bayesncl.training.linear import prepare_linear, train_linear

    explicit = list(HydraConfig.get().overrides.task)
    with input_errors_until_fit(command_name(COMMAND)) as callbacks:
        prepared = prepare_linear(cfg, explicit)
        trainer = train_linear(prepared, extra_callbacks=callbacks)
    name = prepared.spec.trainer.name
    summary = print_run_summary(f"linear evaluation {name}", trainer, resumes=False)
    exit_if_interrupted(summary)


def main() -> int:
    """``solo-bayesncl-linear`` / ``python main_linear.py``: Hydra overrides on ``sys.argv``."""
    return hydra_entry_point(_run, linear_config_dir("cifar"), "linear", COMMAND, SUMMARY, KEYS)
