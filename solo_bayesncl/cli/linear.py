"""Offline linear evaluation of a pretrained backbone, with solo-learn's ``LinearModel``.

    python main_linear.py pretrained_feature_extractor=PATH.ckpt            # CIFAR-100 config
    python main_linear.py --config-name linear.yaml data.dataset=fashion-mnist pretrained_feature_extractor=PATH

The backbone's architecture and stem come from the checkpoint (any of the four methods, and the
official NCL/BayesNCL layouts, see :mod:`solo_bayesncl.checkpoints`); the config gives the data
and the optimizer. Results are logged to ``metrics.csv`` (and wandb when on) under
``checkpoint.dir/linear``.
"""

from __future__ import annotations

from pathlib import Path

import omegaconf
from omegaconf import OmegaConf

from solo_bayesncl.registration import require_solo_learn

__all__ = ["linear_eval", "prepare_linear_cfg"]


def prepare_linear_cfg(cfg: omegaconf.DictConfig):
    """Checks the config and loads the checkpoint; returns ``(cfg, loaded_checkpoint)``."""
    require_solo_learn("main_linear.py")
    from solo.args.linear import parse_cfg

    from solo_bayesncl.checkpoints import load_checkpoint
    from solo_bayesncl.config import resolve_with_solo

    OmegaConf.set_struct(cfg, False)
    path = OmegaConf.select(cfg, "pretrained_feature_extractor", default=None)
    if path in (None, "None", "???"):
        raise ValueError(
            "pretrained_feature_extractor is missing: give the path of a pretrained checkpoint"
        )
    loaded = load_checkpoint(path)
    cfg.backbone = OmegaConf.create(OmegaConf.to_container(loaded.cfg.backbone))
    cfg.pretrain_method = loaded.method
    cfg = resolve_with_solo(cfg, parse_cfg)
    if cfg.data.format == "dali":
        from solo_bayesncl.data.dali import check_linear_dali_cfg

        check_linear_dali_cfg(cfg)
    return cfg, loaded


def _finite_features_hook(checkpoint: Path):
    """A forward hook that stops linear evaluation on NaN/Inf backbone features, which would
    otherwise train a classifier on garbage and report chance accuracy."""

    def hook(_module, _inputs, output):
        from solo_bayesncl.metrics import non_finite_rows

        bad = non_finite_rows(output.flatten(1))
        if bad:
            raise ValueError(
                f"{checkpoint}: the backbone gives NaN or Inf features for {bad} of "
                f"{output.shape[0]} images of a batch (broken weights, e.g. a diverged run)"
            )

    return hook


def linear_eval(cfg: omegaconf.DictConfig, extra_callbacks: list | None = None):
    """Trains a linear classifier on the frozen backbone; returns the Trainer.

    ``extra_callbacks`` are added to the Trainer's (e.g. the benchmark's progress report).
    """
    cfg, loaded = prepare_linear_cfg(cfg)

    import torch
    from lightning.pytorch import seed_everything
    from solo.methods.linear import LinearModel
    from solo.utils.misc import make_contiguous
    from torch.utils.data import DataLoader

    from solo_bayesncl.checkpoints import load_backbone
    from solo_bayesncl.data.datasets import (
        build_labelled_train_dataset,
        build_val_loader,
        linear_train_transform,
    )
    from solo_bayesncl.trainer import build_loggers, build_trainer, checkpoint_callbacks

    seed_everything(cfg.seed)
    backbone = load_backbone(loaded)
    backbone.register_forward_hook(_finite_features_hook(loaded.path))
    model = LinearModel(backbone, loss_func=torch.nn.CrossEntropyLoss(), mixup_func=None, cfg=cfg)
    make_contiguous(model)
    if not cfg.performance.disable_channel_last:
        model = model.to(memory_format=torch.channels_last)

    val_loader = build_val_loader(cfg)
    if cfg.data.format == "dali":  # solo-learn's DALI training pipeline, our validation loader
        from solo_bayesncl.data.dali_modules import build_linear_dali_datamodule

        datamodule = build_linear_dali_datamodule(cfg)
        datamodule.val_dataloader = lambda: val_loader
        fit_data = {"datamodule": datamodule}
    else:
        train_dataset = build_labelled_train_dataset(cfg, linear_train_transform(cfg))
        train_loader = DataLoader(
            train_dataset,
            batch_size=cfg.optimizer.batch_size,
            shuffle=True,
            num_workers=cfg.data.num_workers,
            pin_memory=torch.cuda.is_available(),
            drop_last=True,
        )
        fit_data = {"train_dataloaders": train_loader, "val_dataloaders": val_loader}

    run_root = Path(cfg.checkpoint.dir) / "linear"
    loggers = build_loggers(cfg, run_root, None)
    callbacks: list = checkpoint_callbacks(cfg, run_root)
    callbacks.extend(extra_callbacks or [])
    trainer = build_trainer(cfg, loggers, callbacks)
    trainer.fit(model, **fit_data)
    return trainer
