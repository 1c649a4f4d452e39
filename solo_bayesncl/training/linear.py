"""Offline linear evaluation of a pretrained backbone, with solo-learn's ``LinearModel``.

    solo-bayesncl-linear "pretrained_feature_extractor='PATH.ckpt'"     # or python main_linear.py
    solo-bayesncl-linear "pretrained_feature_extractor='PATH.ckpt'" data.fraction=-1 max_epochs=10

The backbone's architecture and stem come from the checkpoint (any of the four methods, and the
official NCL/BayesNCL layouts, see :mod:`solo_bayesncl.io.checkpoints`), and so do the data it was
trained on: the dataset, its paths, ``data.fraction``, ``data.val_fraction``, the crop size and the
normalisation, each unless given as an override
(:func:`~solo_bayesncl.config.linear.inherit_from_checkpoint`). The config
(``scripts/linear/cifar/linear.yaml``) gives the optimizer and the schedule. Results are logged to
``metrics.csv`` (and wandb when on) under ``checkpoint.dir/linear``.

``probe`` picks the data transforms (:data:`~solo_bayesncl.config.linear.PROBES`): ``standard``
normalises the training and the validation images with the pretraining views' mean/std (CIFAR-100's
for a CIFAR-100 checkpoint), what the backbone was trained on; ``official`` uses solo-learn's
classification transforms on both sides, as the official NCL/BayesNCL probe does (CIFAR-10's
mean/std for CIFAR-100 too, bilinear random resized crops).
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
    "PreparedLinear",
    "linear_eval",
    "prepare_linear",
    "prepare_linear_cfg",
    "train_linear",
]


@dataclass(frozen=True)
class PreparedLinear:
    """A linear evaluation read once: its spec, the checkpoint it probes and the ``probe``
    (:data:`~solo_bayesncl.config.linear.PROBES`)."""

    spec: RunSpec
    loaded: LoadedCheckpoint
    probe: str


def prepare_linear(cfg: omegaconf.DictConfig, explicit: Iterable[str] = ()) -> PreparedLinear:
    """Checks the config and loads the checkpoint, then reads the config once into its spec.

    The checkpoint goes through the checks of :func:`solo_bayesncl.io.checkpoints.load_method`
    (its config in range, weights that match it and are finite), as in every other command.

    The data settings come from the checkpoint except the keys in ``explicit``
    (:func:`~solo_bayesncl.config.linear.inherit_from_checkpoint`).
    """
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


def prepare_linear_cfg(cfg: omegaconf.DictConfig, explicit: Iterable[str] = ()):
    """:func:`prepare_linear`'s config as solo-learn takes it and checkpoint."""
    prepared = prepare_linear(cfg, explicit)
    return prepared.spec.solo, prepared.loaded


def _finite_features_hook(checkpoint: Path):
    """A forward hook that stops linear evaluation on NaN/Inf backbone features, which would
    otherwise train a classifier on garbage and report chance accuracy."""

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
    """Trains a linear classifier on the frozen backbone; returns the Trainer
    (:func:`prepare_linear`, then :func:`train_linear`).

    ``explicit``: the keys the user gave (see :func:`prepare_linear`); ``extra_callbacks``
    are added to the Trainer's (e.g. the benchmark's progress report).
    """
    return train_linear(prepare_linear(cfg, explicit), extra_callbacks)


def train_linear(prepared: PreparedLinear, extra_callbacks: list | None = None):
    """Trains the linear classifier of a prepared evaluation; returns the Trainer."""
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
        fit_data=_fit_data(train_transform),
        run=decide_job_run(spec.fingerprint_source, run_root, resume=False),  # one per job
        callbacks=lambda val_loader: list(extra_callbacks or []),
        val_transform=val_transform,
    )


def _fit_data(train_transform: Callable) -> Callable[[RunSpec, DataLoader | None], dict]:
    """The ``fit_data`` of :func:`solo_bayesncl.training.fit.fit`: the labelled training images
    through ``train_transform`` (random crops and flips), and the validation loader.

    The validation loader draws from a generator of its own (every iterator of a loader draws a
    seed for its workers, from torch's global generator unless the loader has one), so that
    validating takes nothing from the random stream the training epochs draw their order and
    augmentations from: the probe trains the same whether it validates every epoch or only
    after the last (``check_val_every_n_epoch``), and its final accuracy is the same."""

    def fit_data(spec: RunSpec, val_loader: DataLoader | None) -> dict:
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

    return fit_data


def _dali_datamodule(spec: RunSpec):
    """solo-learn's DALI training pipeline (validated on this project's loader)."""
    from solo_bayesncl.data.dali_modules import build_linear_dali_datamodule

    return build_linear_dali_datamodule(spec.data, spec.optimizer.batch_size)
