"""Offline linear evaluation of a pretrained backbone, with solo-learn's ``LinearModel``.

The backbone and its data come from the checkpoint unless overridden
(:func:`~solo_bayesncl.config.linear.inherit_from_checkpoint`); the config gives the optimizer and
schedule. ``probe`` picks the transforms (:data:`~solo_bayesncl.config.linear.PROBES`):
``standard`` uses the pretraining views' mean/std, ``official`` solo-learn's classification
transforms, as the official NCL/BayesNCL probe does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import omegaconf
import torch
from torch.utils.data import DataLoader

from solo_bayesncl.config.checks import check_solo_names
from solo_bayesncl.config.linear import check_probe, linear_cfg, pretrained_path
from solo_bayesncl.config.settings import RunSpec, resolve_with_solo, run_spec
from solo_bayesncl.data.dali import check_linear_dali
from solo_bayesncl.data.datasets import (
    build_labelled_train_dataset,
    linear_train_transform,
    official_transforms,
)
from solo_bayesncl.host.availability import require_solo_learn
from solo_bayesncl.host.models import without_resume_warning
from solo_bayesncl.host.registration import register
from solo_bayesncl.io.checkpoints import (
    LoadedCheckpoint,
    load_backbone,
    load_checkpoint,
    load_method,
)
from solo_bayesncl.metrics import non_finite_rows
from solo_bayesncl.training.auto_resume import decide_job_run
from solo_bayesncl.training.fit import fit, seed_and_layout

__all__ = [
    "linear_eval",
    "prepare_linear",
    "train_linear",
]


@dataclass(frozen=True)
class PreparedLinear:
    """A linear evaluation read once: its spec, the checkpoint and the ``probe``."""

    spec: RunSpec
    loaded: LoadedCheckpoint
    probe: str


def prepare_linear(cfg: omegaconf.DictConfig, explicit: Iterable[str] = ()) -> PreparedLinear:
    """Checks the config, loads and checks the checkpoint and reads the config once into its spec,
    the data settings from the checkpoint except the keys in ``explicit``."""
    require_solo_learn("main_linear.py")
    register()
    from solo.args.linear import parse_cfg
    from solo.methods.linear import LinearModel

    path = pretrained_path(cfg)
    check_solo_names(cfg, LinearModel._OPTIMIZERS, LinearModel._SCHEDULERS)
    loaded = load_checkpoint(path)
    load_method(loaded)  # the checks every command runs on a checkpoint (config, weights)
    backbone = loaded.spec.trainer.arguments["backbone"]
    cfg = linear_cfg(cfg, loaded.spec.data, backbone, loaded.method, explicit)
    cfg = resolve_with_solo(cfg, parse_cfg)
    probe = check_probe(cfg)
    spec = run_spec(cfg)
    if probe == "official" and official_transforms(spec.data) is None:
        raise ValueError(
            "probe=official: the official code has no transforms for "
            f"data.dataset={spec.data.name} "
            "(solo-learn's classification transforms know cifar10, cifar100, stl10, imagenet, "
            "imagenet100); use probe=standard"
        )
    if spec.data.format == "dali":
        check_linear_dali(spec.data)
    return PreparedLinear(spec, loaded, probe)


def _finite_features_hook(checkpoint: Path):
    """A forward hook stopping linear evaluation on NaN/Inf backbone features."""

    def hook(_module, _inputs, output):
        bad = non_finite_rows(output.flatten(1))
        if bad:
            raise ValueError(
                f"{checkpoint}: the backbone gives NaN or Inf features for {bad} of "
                f"{output.shape[0]} images of a batch (broken weights, e.g. a diverged run)"
            )

    return hook


def linear_eval(
    cfg: omegaconf.DictConfig,
    explicit: Iterable[str] = (),
    extra_callbacks: list | None = None,
):
    """:func:`prepare_linear`, then :func:`train_linear`; returns the Trainer."""
    return train_linear(prepare_linear(cfg, explicit), extra_callbacks)


def train_linear(prepared: PreparedLinear, extra_callbacks: list | None = None):
    """Trains the linear classifier on the frozen backbone; returns the Trainer."""
    from solo.methods.linear import LinearModel

    spec, loaded = prepared.spec, prepared.loaded

    def build() -> LinearModel:
        backbone = load_backbone(loaded)
        backbone.register_forward_hook(_finite_features_hook(loaded.path))
        with without_resume_warning():  # the probe never resumes (decide_job_run below)
            return LinearModel(
                backbone, loss_func=torch.nn.CrossEntropyLoss(), mixup_func=None, cfg=spec.solo
            )

    official = official_transforms(spec.data) if prepared.probe == "official" else None
    train_transform, val_transform = official or (linear_train_transform(spec.data), None)
    model = seed_and_layout(spec.trainer.seed, spec.trainer.performance, build)
    run_root = spec.checkpoint.run_root
    return fit(
        spec,
        model,
        dali_datamodule=_dali_datamodule,
        fit_data=lambda spec, val_loader: _fit_data(spec, val_loader, train_transform),
        run=decide_job_run(spec.fingerprint_source, run_root, resume=False),  # one per job
        callbacks=lambda val_loader: list(extra_callbacks or []),
        val_transform=val_transform,
    )


def _fit_data(spec: RunSpec, val_loader: DataLoader | None, train_transform: Callable) -> dict:
    """The ``fit_data`` of :func:`solo_bayesncl.training.fit.fit`: the labelled training images and
    the validation loader, with its own generator (the probe trains the same at any frequency)."""
    if val_loader is not None:
        val_loader.generator = torch.Generator().manual_seed(int(spec.trainer.seed))
    train_loader = DataLoader(
        build_labelled_train_dataset(spec.data, train_transform),
        batch_size=spec.optimizer.batch_size,
        shuffle=True,
        num_workers=spec.data.num_workers,
        pin_memory=torch.cuda.is_available(),
        drop_last=True,
    )
    return {"train_dataloaders": train_loader, "val_dataloaders": val_loader}


def _dali_datamodule(spec: RunSpec):
    from solo_bayesncl.data.dali_modules import build_linear_dali_datamodule

    return build_linear_dali_datamodule(spec.data, spec.optimizer.batch_size)
