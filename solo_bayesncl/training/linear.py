"""Offline linear evaluation of a pretrained backbone, with solo-learn's ``LinearModel``.

    solo-bayesncl-linear "pretrained_feature_extractor='PATH.ckpt'"     # or python main_linear.py
    solo-bayesncl-linear "pretrained_feature_extractor='PATH.ckpt'" data.fraction=-1 max_epochs=10

The backbone's architecture and stem come from the checkpoint (any of the four methods, and the
official NCL/BayesNCL layouts, see :mod:`solo_bayesncl.io.checkpoints`), and so do the data it was
trained on: the dataset, its paths, ``data.fraction``, ``data.val_fraction``, the crop size and
the normalisation, each unless given as an override (:func:`inherit_from_checkpoint`). The
config (``scripts/linear/cifar/linear.yaml``) gives the optimizer and the schedule. Results are
logged to ``metrics.csv`` (and wandb when on) under ``checkpoint.dir/linear``.

``probe`` picks the data transforms (:data:`PROBES`): ``standard`` normalises the training and
the validation images with the pretraining views' mean/std (CIFAR-100's for a CIFAR-100
checkpoint), what the backbone was trained on; ``official`` uses solo-learn's classification
transforms on both sides, as the official NCL/BayesNCL probe does (CIFAR-10's mean/std for
CIFAR-100 too, bilinear random resized crops).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

import omegaconf
import torch
from omegaconf import OmegaConf
from torch.utils.data import DataLoader

from solo_bayesncl.config.checks import check_solo_names
from solo_bayesncl.config.settings import resolve_with_solo, run_settings
from solo_bayesncl.data.dali import check_linear_dali_cfg
from solo_bayesncl.data.datasets import (
    build_labelled_train_dataset,
    linear_train_transform,
    official_transforms,
)
from solo_bayesncl.data.names import dataset_spec
from solo_bayesncl.host.availability import require_solo_learn
from solo_bayesncl.host.models import without_resume_warning
from solo_bayesncl.host.registration import register
from solo_bayesncl.io.checkpoints import load_backbone, load_checkpoint, load_method
from solo_bayesncl.metrics import non_finite_rows
from solo_bayesncl.training.auto_resume import decide_job_run
from solo_bayesncl.training.fit import fit, seed_and_layout

__all__ = ["PROBES", "inherit_from_checkpoint", "linear_eval", "prepare_linear_cfg"]

PROBES: tuple[str, ...] = ("standard", "official")
"""``probe`` values: the transforms of the linear probe (see the module docstring)."""

_DATASET_KEYS = (
    "data.train_path",
    "data.val_path",
    "data.fraction",
    "data.val_fraction",
    "data.num_backgrounds",
    "data.background_seed",
)
"""The data settings a linear evaluation takes from the checkpoint while it evaluates on the
checkpoint's dataset (the scenes' backgrounds included)."""


def _given(key: str, explicit: set[str]) -> bool:
    return any(key == e or key.startswith(e + ".") for e in explicit)


def inherit_from_checkpoint(
    cfg: omegaconf.DictConfig, trained: omegaconf.DictConfig, explicit: Iterable[str] = ()
) -> omegaconf.DictConfig:
    """Takes the data settings of the pretraining run (``trained``, its ``args.json``) into a
    linear-evaluation config, except the keys in ``explicit`` (overrides the user gave; a key
    also covers its children, ``data`` covers every ``data.*``).

    The dataset always follows the checkpoint unless given. Its paths, ``fraction``,
    ``val_fraction`` and normalisation follow only while the dataset is the checkpoint's; the
    crop size always does (the backbone was trained at that resolution).
    """
    explicit = {k.split("=", 1)[0].lstrip("+~") for k in explicit}
    trained_dataset = dataset_spec(trained).name if "data" in trained else None
    if trained_dataset is not None and not _given("data.dataset", explicit):
        OmegaConf.update(cfg, "data.dataset", str(trained_dataset), force_add=True)
    same_dataset = str(OmegaConf.select(cfg, "data.dataset", default="")) == str(trained_dataset)
    keys = [k for k in _DATASET_KEYS if same_dataset]
    pipelines = OmegaConf.select(trained, "augmentations", default=None) or []
    aug = pipelines[0] if len(pipelines) else {}
    taken = {key: OmegaConf.select(trained, key, default=None) for key in keys}
    taken["data.augmentations.crop_size"] = aug.get("crop_size", None)
    if same_dataset:
        taken["data.augmentations.mean"] = aug.get("mean", None)
        taken["data.augmentations.std"] = aug.get("std", None)
    for key, value in taken.items():
        if value is not None and not _given(key, explicit):
            OmegaConf.update(cfg, key, value, force_add=True)
    return cfg


def prepare_linear_cfg(cfg: omegaconf.DictConfig, explicit: Iterable[str] = ()):
    """Checks the config and loads the checkpoint; returns ``(cfg, loaded_checkpoint)``.

    The checkpoint goes through the checks of :func:`solo_bayesncl.io.checkpoints.load_method`
    (its config in range, weights that match it and are finite), as in every other command.

    The data settings come from the checkpoint except the keys in ``explicit``
    (:func:`inherit_from_checkpoint`).
    """
    require_solo_learn("main_linear.py")
    register()
    from solo.args.linear import parse_cfg
    from solo.methods.linear import LinearModel

    OmegaConf.set_struct(cfg, False)
    path = OmegaConf.select(cfg, "pretrained_feature_extractor", default=None)
    if path in (None, "None", "???"):
        raise ValueError(
            "pretrained_feature_extractor is missing: give the path of a pretrained checkpoint"
        )
    check_solo_names(cfg, LinearModel._OPTIMIZERS, LinearModel._SCHEDULERS)
    loaded = load_checkpoint(path)
    load_method(loaded)  # the checks every command runs on a checkpoint (config, weights)
    cfg = inherit_from_checkpoint(cfg, loaded.cfg, explicit)
    cfg.backbone = OmegaConf.create(OmegaConf.to_container(loaded.cfg.backbone))
    cfg.pretrain_method = loaded.method
    cfg = resolve_with_solo(cfg, parse_cfg)
    _check_probe(cfg)
    if cfg.data.format == "dali":
        check_linear_dali_cfg(cfg)
    return cfg, loaded


def _check_probe(cfg: omegaconf.DictConfig) -> None:
    """``probe`` is one of :data:`PROBES`, and ``official`` only where solo-learn has the
    dataset's classification transforms."""
    probe = OmegaConf.select(cfg, "probe", default=None) or "standard"
    if probe not in PROBES:
        raise ValueError(f"probe={probe!r} is not supported; allowed values: {', '.join(PROBES)}")
    if probe == "official" and official_transforms(cfg) is None:
        raise ValueError(
            "probe=official: the official code has no transforms for "
            f"data.dataset={dataset_spec(cfg).name} "
            "(solo-learn's classification transforms know cifar10, cifar100, stl10, imagenet, "
            "imagenet100); use probe=standard"
        )
    OmegaConf.update(cfg, "probe", probe, force_add=True)


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
    prepared=None,
):
    """Trains a linear classifier on the frozen backbone; returns the Trainer.

    ``explicit``: the keys the user gave (see :func:`prepare_linear_cfg`); ``extra_callbacks``
    are added to the Trainer's (e.g. the benchmark's progress report); ``prepared``: the result
    of :func:`prepare_linear_cfg` when already run.
    """
    cfg, loaded = prepared if prepared is not None else prepare_linear_cfg(cfg, explicit)
    from solo.methods.linear import LinearModel

    def build() -> LinearModel:
        backbone = load_backbone(loaded)
        backbone.register_forward_hook(_finite_features_hook(loaded.path))
        with without_resume_warning():  # the probe never resumes (decide_job_run below)
            return LinearModel(
                backbone, loss_func=torch.nn.CrossEntropyLoss(), mixup_func=None, cfg=cfg
            )

    official = official_transforms(cfg) if cfg.get("probe", "standard") == "official" else None
    train_transform, val_transform = official or (linear_train_transform(cfg), None)
    settings = run_settings(cfg, compiles=False)
    model = seed_and_layout(settings.seed, settings.performance, build)
    run_root = Path(cfg.checkpoint.dir) / "linear"
    return fit(
        cfg,
        settings,
        model,
        run_root,
        dali_datamodule=_dali_datamodule,
        fit_data=_fit_data(train_transform),
        run=decide_job_run(OmegaConf.to_container(cfg), run_root, resume=False),  # one per job
        callbacks=lambda val_loader: list(extra_callbacks or []),
        val_transform=val_transform,
    )


def _fit_data(
    train_transform: Callable,
) -> Callable[[omegaconf.DictConfig, DataLoader | None], dict]:
    """The ``fit_data`` of :func:`solo_bayesncl.training.fit.fit`: the labelled training images
    through ``train_transform`` (random crops and flips), and the validation loader.

    The validation loader draws from a generator of its own (every iterator of a loader draws a
    seed for its workers, from torch's global generator unless the loader has one), so that
    validating takes nothing from the random stream the training epochs draw their order and
    augmentations from: the probe trains the same whether it validates every epoch or only
    after the last (``check_val_every_n_epoch``), and its final accuracy is the same."""

    def fit_data(cfg: omegaconf.DictConfig, val_loader: DataLoader | None) -> dict:
        if val_loader is not None:
            val_loader.generator = torch.Generator().manual_seed(int(cfg.seed))
        train_loader = DataLoader(
            build_labelled_train_dataset(cfg, train_transform),
            batch_size=cfg.optimizer.batch_size,
            shuffle=True,
            num_workers=cfg.data.num_workers,
            pin_memory=torch.cuda.is_available(),
            drop_last=True,
        )
        return {"train_dataloaders": train_loader, "val_dataloaders": val_loader}

    return fit_data


def _dali_datamodule(cfg: omegaconf.DictConfig):
    """solo-learn's DALI training pipeline (validated on this project's loader)."""
    from solo_bayesncl.data.dali_modules import build_linear_dali_datamodule

    return build_linear_dali_datamodule(cfg)
