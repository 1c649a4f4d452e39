"""The Lightning Trainer and loggers shared by the entry points.

Every run writes ``metrics.csv`` beside its checkpoints; wandb logs too when ``wandb.enabled``,
offline when no login is stored, so that no default asks for one or hangs.
"""

from __future__ import annotations

import csv
import inspect
import os
import secrets
from pathlib import Path

import omegaconf
from omegaconf import OmegaConf

from solo_bayesncl.config.runtime import trainer_devices

__all__ = [
    "build_loggers",
    "build_trainer",
    "checkpoint_callbacks",
    "csv_log_dir",
    "last_logged_value",
    "run_summary",
]


def _wandb_login_available() -> bool:
    if os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_MODE") in {"offline", "disabled"}:
        return True
    netrc = Path(os.environ.get("NETRC", Path.home() / ".netrc"))
    return netrc.is_file() and "api.wandb.ai" in netrc.read_text(errors="ignore")


def build_loggers(cfg: omegaconf.DictConfig, run_dir_root: Path, wandb_run_id: str | None) -> list:
    """wandb (when ``wandb.enabled``) first, then a CSV logger writing ``metrics.csv`` into the
    run's checkpoint folder. Without stored wandb credentials, wandb logs offline instead of
    prompting for a login."""
    from lightning.pytorch.loggers import CSVLogger

    loggers: list = []
    if cfg.wandb.enabled:
        from lightning.pytorch.loggers.wandb import WandbLogger

        offline = bool(cfg.wandb.offline)
        if not offline and not _wandb_login_available():
            print("wandb: no stored login (WANDB_API_KEY or ~/.netrc); logging offline instead.")
            offline = True
        wandb_logger = WandbLogger(
            name=cfg.name,
            project=cfg.wandb.project,
            entity=cfg.wandb.entity,
            offline=offline,
            resume="allow" if wandb_run_id else None,
            id=wandb_run_id,
        )
        wandb_logger.log_hyperparams(OmegaConf.to_container(cfg))
        loggers.append(wandb_logger)
        version = str(wandb_logger.version)
    else:
        version = "offline-" + secrets.token_hex(4)
    loggers.append(CSVLogger(save_dir=str(run_dir_root), name="", version=version))
    return loggers


def build_trainer(cfg: omegaconf.DictConfig, loggers: list, callbacks: list):
    """A Trainer from the config's Trainer keys, with devices as Lightning takes them."""
    from lightning.pytorch import Trainer

    kwargs = OmegaConf.to_container(cfg)
    valid = inspect.signature(Trainer.__init__).parameters
    kwargs = {k: v for k, v in kwargs.items() if k in valid}
    strategy = cfg.strategy
    if strategy == "ddp":
        from lightning.pytorch.strategies.ddp import DDPStrategy

        strategy = DDPStrategy(find_unused_parameters=False)
    kwargs.update(
        {
            "devices": trainer_devices(cfg),
            "logger": loggers,
            "callbacks": callbacks,
            "enable_checkpointing": False,
            "strategy": strategy,
        }
    )
    return Trainer(**kwargs)


def checkpoint_callbacks(cfg: omegaconf.DictConfig, run_root: Path) -> list:
    """solo-learn's Checkpointer (checkpoints and ``args.json`` under ``run_root``) when
    ``checkpoint.enabled``, else no callback."""
    if not cfg.checkpoint.enabled:
        return []
    from solo.utils.checkpointer import Checkpointer

    return [
        Checkpointer(
            cfg,
            logdir=run_root,
            frequency=cfg.checkpoint.frequency,
            keep_prev=cfg.checkpoint.keep_prev,
        )
    ]


def last_logged_value(metrics_csv: Path, column: str) -> float | None:
    """The last non-empty value of ``column`` in a Lightning ``metrics.csv``; None if never logged."""
    value = None
    with open(metrics_csv, newline="") as f:
        for row in csv.DictReader(f):
            if row.get(column):
                value = float(row[column])
    return value


def csv_log_dir(trainer) -> Path:
    """The folder of the trainer's CSV logger: where this fit's ``metrics.csv`` is written."""
    from lightning.pytorch.loggers import CSVLogger

    for logger in trainer.loggers:
        if isinstance(logger, CSVLogger):
            return Path(logger.log_dir)
    raise ValueError("the trainer has no CSV logger (build_loggers adds one to every run)")


def run_summary(trainer) -> dict[str, str | float | None]:
    """Last validation top-1 accuracy, last checkpoint and ``metrics.csv`` of a finished fit."""
    checkpoint = None
    for callback in trainer.callbacks:
        last = getattr(callback, "last_ckpt", None)
        if last:
            checkpoint = str(last)
    try:
        path = csv_log_dir(trainer) / "metrics.csv"
    except ValueError:  # a Trainer built elsewhere, without the CSV logger
        path = None
    metrics_csv = str(path) if path is not None and path.is_file() else None
    val_acc1 = last_logged_value(Path(metrics_csv), "val_acc1") if metrics_csv else None
    if val_acc1 is None and "val_acc1" in trainer.callback_metrics:
        val_acc1 = float(trainer.callback_metrics["val_acc1"])
    return {"val_acc1": val_acc1, "checkpoint": checkpoint, "metrics_csv": metrics_csv}
