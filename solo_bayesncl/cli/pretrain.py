"""``solo-bayesncl-pretrain`` / ``python main_pretrain.py``: a Hydra app on the shipped
``scripts/pretrain/cifar`` configs that runs :func:`solo_bayesncl.training.pretrain.pretrain`."""

from __future__ import annotations

import omegaconf

from solo_bayesncl.cli.console import (
    exit_if_interrupted,
    hydra_entry_point,
    input_errors_until_fit,
    print_run_summary,
)
from solo_bayesncl.cli.invocation import command_name
from solo_bayesncl.config.shipped import pretrain_config_dir
from solo_bayesncl.data.names import OFFLINE_DATASETS, SOLO_DATASETS

__all__ = ["COMMAND", "KEYS", "SUMMARY", "main"]

COMMAND = "solo-bayesncl-pretrain"  # the installed console script

SUMMARY = (
    "Self-supervised pretraining with solo-learn: bayesncl, ncl, simclr or mocov2plus "
    "(one config each)."
)
KEYS: tuple[tuple[str, str], ...] = (
    ("data.dataset", f"{', '.join((*SOLO_DATASETS, *OFFLINE_DATASETS))} (custom: an image folder)"),
    ("data.train_path, data.val_path", "where the data is (custom: class sub-folders of images)"),
    ("data.fraction, data.val_fraction", "share of the training / validation set used, -1 all"),
    ("max_epochs", "epochs of training"),
    ("optimizer.batch_size", "the global batch, split over the devices"),
    ("optimizer.lr", "learning rate for a batch of 256 (scaled by batch/256)"),
    ("method_kwargs.temperature", "InfoNCE temperature; method_kwargs.* are the method's keys"),
    ("data.num_workers", "data loader processes"),
    ("accelerator, devices, precision", "auto: every GPU with 16-mixed, else the CPU with fp32"),
    ("checkpoint.dir", "where runs are written: <dir>/<method>/<run>/"),
    ("auto_resume.enabled", "resume the unfinished run of the same config"),
    ("interpretability.enabled", "interpretability metrics during training"),
    ("wandb.enabled", "log to wandb too (offline without a stored login)"),
    ("seed", "the seed of every generator"),
)


def _run(cfg: omegaconf.DictConfig) -> None:
    from solo_bayesncl.training.pretrain import prepare_pretrain, train_pretrain

    with input_errors_until_fit(command_name(COMMAND)) as callbacks:
        spec = prepare_pretrain(cfg)
        trainer = train_pretrain(spec, extra_callbacks=callbacks)
    exit_if_interrupted(print_run_summary(f"pretraining {spec.trainer.name}", trainer))


def main() -> int:
    """``solo-bayesncl-pretrain`` / ``python main_pretrain.py``: Hydra overrides on ``sys.argv``."""
    return hydra_entry_point(_run, pretrain_config_dir("cifar"), "bayesncl", COMMAND, SUMMARY, KEYS)
