"""The checks of the keys every pretraining and linear run reads, before anything is built
(:func:`check_run_cfg`): the known keys at the top and under ``data``, their ranges, and the
names solo-learn resolves (:func:`check_solo_names`)."""

from __future__ import annotations

import difflib
import importlib
import inspect
import math
from collections.abc import Iterable, Mapping
from typing import Any

import omegaconf
from omegaconf import OmegaConf

from solo_bayesncl.core.distributed import launched_as_rank_zero
from solo_bayesncl.core.validation import (
    ConfigError,
    parse_bool,
    require_choice,
    require_fraction,
    require_int,
    require_known_keys,
    require_range,
)
from solo_bayesncl.data.names import SCENES, dataset_name

__all__ = [
    "DEFAULT_CHECKPOINT_INTERVAL_S",
    "check_run_cfg",
    "check_solo_names",
    "fit_backbone_to_crops",
]

DATA_KEYS: tuple[str, ...] = (
    "dataset",
    "train_path",
    "val_path",
    "format",
    "num_workers",
    "fraction",
    "val_fraction",
    "no_labels",
    "augmentations",
    "augment_on",
    "offline_dataset",
    "num_classes",
    "num_large_crops",
    "num_small_crops",
    "num_backgrounds",
    "background_seed",
)
"""Every ``data.*`` key solo-learn or the plugin reads; the entry points refuse any other."""
TOP_LEVEL_KEYS: tuple[str, ...] = (
    "name",
    "method",
    "method_kwargs",
    "backbone",
    "data",
    "augmentations",
    "optimizer",
    "scheduler",
    "checkpoint",
    "auto_resume",
    "seed",
    "wandb",
    "knn_eval",
    "performance",
    "resume_from_checkpoint",
    "momentum",
    "dali",
    "interpretability",
    "pretrain_method",
    "pretrained_feature_extractor",
    "probe",
    "finetune",
    "label_smoothing",
    "mixup",
    "cutmix",
    "auto_augment",
    "auto_umap",
    "debug_augmentations",
    "distributed",  # timeout_s: how long the processes of a job wait for each other
    "threads",  # torch's CPU threads (solo_bayesncl.core.threads)
)
"""Top-level keys solo-learn's scripts or the plugin read (``probe``: ``standard`` or
``official``); the arguments of Lightning's ``Trainer`` are known too."""
CHECKPOINT_KEYS: tuple[str, ...] = ("enabled", "dir", "frequency", "keep_prev", "time_interval_s")
"""Every ``checkpoint.*`` key: solo-learn's ``Checkpointer``'s four, and ``time_interval_s``, the
seconds between the checkpoints a pretraining saves within an epoch (0 or null: none)."""
DEFAULT_CHECKPOINT_INTERVAL_S = 60.0
"""``checkpoint.time_interval_s`` by default: an interruption loses about a minute at most."""
PERFORMANCE_KEYS: tuple[str, ...] = (
    "disable_channel_last",
    "compile",
    "small_map_convs",
)
"""Every ``performance.*`` key: solo-learn's ``disable_channel_last`` and the plugin's two."""
SECTION_KEYS: dict[str, tuple[str, ...]] = {
    "optimizer": (
        "name",
        "batch_size",
        "batch_size_scope",
        "global_batch_size",
        "lr",
        "classifier_lr",
        "weight_decay",
        "kwargs",
        "exclude_bias_n_norm_wd",
        "layer_decay",
    ),
    "scheduler": (
        "name",
        "warmup_start_lr",
        "warmup_epochs",
        "min_lr",
        "lr_decay_steps",
        "interval",
    ),
    "backbone": ("name", "kwargs", "small_stem"),
    "wandb": ("enabled", "project", "entity", "offline"),
    "auto_resume": ("enabled", "max_hours"),
    "data.augmentations": ("crop_size", "mean", "std"),
    "distributed": ("timeout_s",),
    "knn_eval": ("enabled", "k", "distance_func"),
}
"""The keys solo-learn's scripts and the plugin read in these sections; the entry points refuse
any other (it would be ignored), and a key one method alone reads is known on that method only."""
SCENE_KEYS: tuple[str, ...] = ("num_backgrounds", "background_seed")
"""``data.*`` keys only ``fashion-mnist-scenes`` reads."""

#: Boolean keys of solo-learn's configs that entry points read with ``if``.
_RUN_BOOLEANS = (
    "wandb.enabled",
    "wandb.offline",
    "checkpoint.enabled",
    "auto_resume.enabled",
    "data.no_labels",
    *(f"performance.{key}" for key in PERFORMANCE_KEYS),
    "interpretability.enabled",
)


def check_solo_names(
    cfg: omegaconf.DictConfig,
    optimizers: Mapping[str, Any],
    schedulers: Iterable[str],
    backbones: Iterable[str] | None = None,
) -> None:
    """``optimizer.name``, ``scheduler.name`` and (with ``backbones``) ``backbone.name`` among the
    names solo-learn knows, which it would only assert once training starts; ``optimizer.kwargs``
    and ``backbone.kwargs`` among the arguments of the optimizer and the backbone's class."""
    checks = [("optimizer.name", optimizers), ("scheduler.name", schedulers)]
    if backbones is not None:
        checks.append(("backbone.name", backbones))
    for key, allowed in checks:
        value = OmegaConf.select(cfg, key, default=None, throw_on_missing=False)
        if value is not None:
            require_choice(key, value, allowed)
    optimizer = OmegaConf.select(cfg, "optimizer.name", default=None)
    if optimizer is not None:
        # solo-learn gives the parameters, lr and weight_decay itself
        _require_arguments("optimizer.kwargs", cfg, optimizers[optimizer], {"params", "lr"})
    backbone = str(OmegaConf.select(cfg, "backbone.name", default=""))
    for prefix, (owner, given) in BACKBONE_CLASSES.items():
        if backbones is not None and backbone.startswith(prefix):
            module, _, name = owner.rpartition(".")
            built = getattr(importlib.import_module(module), name)
            _require_arguments("backbone.kwargs", cfg, built, {"num_classes", *given})


BACKBONE_CLASSES: dict[str, tuple[str, tuple[str, ...]]] = {
    "resnet": ("torchvision.models.resnet.ResNet", ("block", "layers")),
    "vit_": (
        "timm.models.vision_transformer.VisionTransformer",
        ("embed_dim", "depth", "num_heads"),
    ),
    "swin_": (
        "timm.models.swin_transformer.SwinTransformer",
        ("patch_size", "embed_dim", "depths", "num_heads"),
    ),
    "convnext_": ("timm.models.convnext.ConvNeXt", ("depths", "dims")),
}
"""The class each of solo-learn's backbones (by name prefix) is built as, taking
``backbone.kwargs``, less the arguments solo-learn's builder gives itself."""


def _require_arguments(key: str, cfg: omegaconf.DictConfig, target: Any, given: set[str]) -> None:
    """The keys of the mapping at ``key`` among the keyword arguments of ``target`` (a class:
    its ``__init__``), less those the caller gives itself (``given``)."""
    kwargs = OmegaConf.select(cfg, key, default=None) or {}
    params = inspect.signature(target.__init__).parameters
    allowed = sorted(set(params) - {"self", "weight_decay"} - given)
    unknown = sorted(str(k) for k in kwargs if k not in allowed)
    if unknown:
        close = difflib.get_close_matches(unknown[0], allowed, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise ConfigError(
            f"{key}.{unknown[0]} is not an argument of {target.__name__}{hint}; "
            f"allowed: {', '.join(allowed)}"
        )


def _require_known_top_level_keys(cfg: omegaconf.DictConfig) -> None:
    """A misspelt top-level key (``max_epoch=5``) would be ignored and its default used."""
    from lightning.pytorch import Trainer

    known = set(TOP_LEVEL_KEYS) | set(inspect.signature(Trainer.__init__).parameters) - {"self"}
    unknown = sorted(str(k) for k in cfg if k not in known)
    if unknown:
        close = difflib.get_close_matches(unknown[0], sorted(known), n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise ConfigError(
            f"unknown top-level key(s) {', '.join(unknown)}{hint}; known keys: "
            f"{', '.join(TOP_LEVEL_KEYS)} and the arguments of Lightning's Trainer"
        )


def _set(cfg: omegaconf.DictConfig, key: str, value: Any) -> None:
    OmegaConf.update(cfg, key, value, merge=False)


def _checkpoint_interval(value: Any) -> float:
    """``checkpoint.time_interval_s`` as seconds, 0 for none (null, 0); refused otherwise."""
    key = "checkpoint.time_interval_s"
    if value is None:
        return 0.0
    try:
        number = math.nan if isinstance(value, bool) else float(value)
    except (TypeError, ValueError):
        number = math.nan
    if not 0 <= number < math.inf:
        raise ConfigError(
            f"{key}={value!r} is not allowed; give the seconds between the checkpoints saved "
            "within an epoch, a number >= 0 (0 or null: none)"
        )
    return number


def _given(cfg: omegaconf.DictConfig, key: str) -> bool:
    """Whether the config writes ``key``, null included."""
    section, _, name = key.rpartition(".")
    node = OmegaConf.select(cfg, section, default=None) if section else cfg
    return isinstance(node, omegaconf.DictConfig) and name in node


def _require_given_values(cfg: omegaconf.DictConfig) -> None:
    """Refuses what would be read as something else: a null ``checkpoint.dir`` (a folder ``None``),
    and linear evaluation's ``data.augmentations`` in a pretraining config."""
    if _given(cfg, "checkpoint.dir") and OmegaConf.select(cfg, "checkpoint.dir") is None:
        raise ConfigError(
            "checkpoint.dir=null: give the folder the runs are written under (a path)"
        )
    pipelines = OmegaConf.select(cfg, "augmentations", default=None)
    if OmegaConf.is_list(pipelines) and _given(cfg, "data.augmentations"):
        raise ConfigError(
            "data.augmentations is read by linear evaluation only; a pretraining config crops "
            "and normalises with its augmentations pipelines (augmentations.<i>.crop_size, "
            "mean, std): remove data.augmentations"
        )


def _require_probe_callback(probe: Any, enabled: Any) -> None:
    """``interpretability.probe`` needs the interpretability callback on (nothing else runs it)."""
    if probe is None or not parse_bool("interpretability.probe", probe):
        return
    if enabled is None or not parse_bool("interpretability.enabled", enabled):
        raise ConfigError(
            "interpretability.probe=True needs interpretability.enabled=True (the probe runs in "
            "the interpretability callback); set interpretability.enabled=True, or remove "
            "interpretability.probe"
        )


def check_run_cfg(cfg: omegaconf.DictConfig) -> omegaconf.DictConfig:
    """Range checks of the keys every pretraining and linear run reads, before anything is built,
    only known keys (scene keys on ``fashion-mnist-scenes`` only), booleans parsed strictly and
    written back normalised (``"false"`` becomes ``False``)."""

    def present(key: str) -> Any:
        return OmegaConf.select(cfg, key, default=None, throw_on_missing=False)

    # the methods package loads solo-learn: imported here, so that --help answers without it
    from solo_bayesncl.methods.keys import check_owned_keys, owned_keys

    _require_known_top_level_keys(cfg)
    check_owned_keys(cfg)
    require_known_keys("data", present("data"), DATA_KEYS)
    require_known_keys("checkpoint", present("checkpoint"), CHECKPOINT_KEYS)
    require_known_keys("performance", present("performance"), PERFORMANCE_KEYS)
    owned = [key.rpartition(".") for key in owned_keys()]
    for section, known in SECTION_KEYS.items():
        if isinstance(present(section), omegaconf.DictConfig | dict):
            own = tuple(name for part, _, name in owned if part == section)
            require_known_keys(section, present(section), known + own)
    dataset = dataset_name(cfg)
    for name in SCENE_KEYS:
        if present(f"data.{name}") is not None and dataset != SCENES:
            raise ConfigError(
                f"data.{name} is read by data.dataset={SCENES} only; "
                f"data.dataset={dataset} would ignore it (remove it, or train on {SCENES})"
            )
    if present("seed") is not None:
        _set(cfg, "seed", require_int("seed", present("seed"), low=0, high=2**32 - 1))
    for key in ("max_epochs", "optimizer.batch_size", "checkpoint.frequency", "knn_eval.k"):
        if present(key) is not None:
            _set(cfg, key, require_int(key, present(key), low=1))
    _require_given_values(cfg)
    if present("data.num_workers") is not None:
        _set(
            cfg, "data.num_workers", require_int("data.num_workers", present("data.num_workers"), 0)
        )
    for key in ("optimizer.lr", "optimizer.classifier_lr", "auto_resume.max_hours"):
        if _given(cfg, key):  # null too: solo-learn would fail on it, or read it as no value
            _set(cfg, key, require_range(key, present(key), low=0.0, high=math.inf))
    if present("optimizer.weight_decay") is not None:
        wd = require_range(
            "optimizer.weight_decay", present("optimizer.weight_decay"), 0.0, math.inf, True
        )
        _set(cfg, "optimizer.weight_decay", wd)
    for key in ("data.fraction", "data.val_fraction"):
        if present(key) is not None:
            _set(cfg, key, require_fraction(key, present(key)))
    for i, pipeline in enumerate(present("augmentations") or []):
        for name in ("crop_size", "num_crops"):
            if name in pipeline:
                pipeline[name] = require_int(f"augmentations[{i}].{name}", pipeline[name], low=1)
    if present("data.augmentations.crop_size") is not None:
        key = "data.augmentations.crop_size"
        _set(cfg, key, require_int(key, present(key), low=1))
    for key in _RUN_BOOLEANS:
        if present(key) is not None:
            _set(cfg, key, parse_bool(key, present(key)))
    _require_probe_callback(present("interpretability.probe"), present("interpretability.enabled"))
    interval = OmegaConf.select(
        cfg, "checkpoint.time_interval_s", default=DEFAULT_CHECKPOINT_INTERVAL_S
    )
    _set(cfg, "checkpoint.time_interval_s", _checkpoint_interval(interval))
    return cfg


SIZED_BACKBONES: tuple[str, ...] = ("vit_", "swin_")
"""Name prefixes of solo-learn's backbones that timm builds for one input size (``img_size``,
224 unless given): every ViT and Swin; the other backbones take any size."""


def fit_backbone_to_crops(cfg: omegaconf.DictConfig) -> None:
    """Gives a ViT or Swin backbone the crop size as ``backbone.kwargs.img_size`` when unset
    (saying so once); refuses crops of several sizes or an ``img_size`` the crops do not have."""
    name = str(OmegaConf.select(cfg, "backbone.name", default=""))
    if not name.startswith(SIZED_BACKBONES):
        return
    crops = sorted({int(p.crop_size) for p in OmegaConf.select(cfg, "augmentations") or []})
    if len(crops) != 1:
        raise ConfigError(
            f"backbone.name={name} takes images of one size (timm's img_size) and the "
            f"augmentations crop {' and '.join(map(str, crops))} px: give every pipeline one "
            "crop_size"
        )
    patch = OmegaConf.select(cfg, "backbone.kwargs.patch_size", default=None)
    if patch is not None and require_int("backbone.kwargs.patch_size", patch, low=1) > crops[0]:
        raise ConfigError(
            f"backbone.kwargs.patch_size={patch} is larger than the {crops[0]} px crops "
            "(augmentations.<i>.crop_size) the ViT reads: give a patch_size of at most "
            f"{crops[0]} px"
        )
    given = OmegaConf.select(cfg, "backbone.kwargs.img_size", default=None)
    if given is None:
        OmegaConf.update(cfg, "backbone.kwargs.img_size", crops[0], force_add=True)
        if launched_as_rank_zero():
            print(
                f"backbone.kwargs.img_size={crops[0]}: {name} is built for the {crops[0]} px crops",
                flush=True,
            )
    elif given != crops[0]:
        raise ConfigError(
            f"backbone.kwargs.img_size={given!r}, but the augmentations crop {crops[0]} px and "
            f"{name} takes only its img_size: set ++backbone.kwargs.img_size={crops[0]} (or "
            "remove it, and the crop size is taken)"
        )
