"""The shipped configs under upstream solo-learn's own scripts (unchanged), a Hydra callback::

    python main_pretrain.py --config-path <this package>/scripts/pretrain/cifar \\
        --config-name bayesncl.yaml devices=[0] precision=16-mixed

Upstream's ``solo.methods.METHODS`` gains ``bayesncl`` and ``ncl`` only once ``solo_bayesncl``
is imported, so every shipped config declares :class:`UpstreamScripts` under ``hydra.callbacks``
(docs/architecture.md). Keys that upstream's scripts read differently (the learning rate scaled
by ``len(devices)``, a per-device batch, ...) are refused in one line naming each key and the
override to give (:func:`upstream_problems`): the callback cannot change the task's config.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import omegaconf
from hydra.experimental.callback import Callback
from omegaconf import OmegaConf

from solo_bayesncl.config.runtime import job_processes
from solo_bayesncl.core.validation import ConfigError
from solo_bayesncl.data.names import (
    OFFLINE_DATASETS,
    SMALL_IMAGE_DATASETS,
    SOLO_DATASETS,
    canonical_name,
    small_stem,
)
from solo_bayesncl.host.registration import register
from solo_bayesncl.methods.keys import (
    METHOD_SETTINGS,
    check_method_kwargs,
    check_owned_keys,
)

__all__ = ["UpstreamScripts", "check_method_keys", "upstream_problems"]

_PACKAGE = "solo_bayesncl"


def _is_linear(cfg: omegaconf.DictConfig) -> bool:
    """A linear-evaluation config (it names the pretrained checkpoint), else a pretraining one."""
    return "pretrained_feature_extractor" in cfg


def _devices_problem(cfg: omegaconf.DictConfig) -> str | None:
    devices = OmegaConf.select(cfg, "devices", default=None)
    if isinstance(devices, omegaconf.ListConfig | list | tuple) and len(devices) > 0:
        return None
    if devices == "1":
        return None
    return (
        f"devices={devices!r}: upstream's script multiplies the learning rate by len(devices); "
        "give the GPU ids, devices=[0] (or [0,1], ...), or on the CPU accelerator=cpu devices='1'"
    )


def _batch_problem(cfg: omegaconf.DictConfig) -> str | None:
    scope = OmegaConf.select(cfg, "optimizer.batch_size_scope", default=None)
    world = job_processes(cfg)
    if scope != "global" or world == 1:
        return None
    batch = OmegaConf.select(cfg, "optimizer.batch_size", default=None)
    per_device = (
        f"optimizer.batch_size={batch // world}"
        if isinstance(batch, int) and batch % world == 0
        else "a per-device optimizer.batch_size"
    )
    return (
        f"optimizer.batch_size_scope=global: upstream's script reads optimizer.batch_size={batch} "
        f"per device, a global batch of {batch} x {world}; give {per_device} "
        "optimizer.batch_size_scope=per_device"
    )


def _dataset_problem(cfg: omegaconf.DictConfig) -> str | None:
    dataset = str(OmegaConf.select(cfg, "data.dataset", default=""))
    if dataset in SOLO_DATASETS:
        return None
    own = canonical_name(dataset) in OFFLINE_DATASETS
    return (
        f"data.dataset={dataset!r}"
        + (" is this package's own" if own else " is not a solo-learn dataset")
        + f"; upstream's script reads {', '.join(SOLO_DATASETS)} (custom: an image folder)"
    )


def _small_stem_problem(cfg: omegaconf.DictConfig) -> str | None:
    small = OmegaConf.select(cfg, "backbone.small_stem", default=None)
    dataset = OmegaConf.select(cfg, "data.dataset", default=None)
    if small is None or bool(small) == small_stem(dataset):
        return None
    return (
        f"backbone.small_stem={small}: upstream's script gives ResNets the small stem on "
        f"{' and '.join(SMALL_IMAGE_DATASETS)} only; drop the key"
    )


def _own_key_problems(cfg: omegaconf.DictConfig) -> list[str]:
    """Keys only this package's commands read, set to something other than upstream's
    behaviour: ``(key, value upstream behaves as, what upstream does)``."""
    if _is_linear(cfg):
        own: tuple[tuple[str, Any, str], ...] = (
            ("probe", "official", "always uses solo-learn's classification transforms"),
        )
        if OmegaConf.select(cfg, "data.format", default=None) != "dali":
            own += (("data.fraction", -1, "trains the probe on the whole training set"),)
    else:
        own = (
            ("interpretability.enabled", False, "has no interpretability callback"),
            ("data.val_fraction", -1, "validates on the whole validation set"),
            ("data.augment_on", "per_image", "augments in its data loader"),
        )
    problems = []
    for key, upstream, what in own:
        value = OmegaConf.select(cfg, key, default=None)
        if value is not None and value != upstream:
            problems.append(
                f"{key}={value}: upstream's script {what}; give {key}={upstream} "
                "or run this package's command"
            )
    return problems


def _linear_backbone_problem(cfg: omegaconf.DictConfig) -> str | None:
    if OmegaConf.select(cfg, "backbone.name", default=None) is not None:
        return None
    name = _checkpoint_backbone(OmegaConf.select(cfg, "pretrained_feature_extractor", default=None))
    return (
        "backbone.name is missing: upstream's main_linear.py builds the backbone from it (this "
        "package's command reads the checkpoint's args.json); give "
        + (f"+backbone.name={name} (the checkpoint's)" if name else "+backbone.name=resnet18")
    )


def _checkpoint_backbone(checkpoint: str | None) -> str | None:
    """The backbone named in the ``args.json`` beside a checkpoint, when there is one."""
    if not checkpoint:
        return None
    args = Path(checkpoint).expanduser().parent / "args.json"
    try:
        name = OmegaConf.select(OmegaConf.load(args), "backbone.name", default=None)
    except (OSError, ValueError, omegaconf.errors.OmegaConfBaseException):
        return None
    return str(name) if name else None


def upstream_problems(cfg: omegaconf.DictConfig) -> list[str]:
    """What upstream solo-learn's scripts would read differently from this package's commands in
    ``cfg``, one sentence per key naming the override to give."""
    checks = [_devices_problem, _batch_problem, _dataset_problem, _small_stem_problem]
    if _is_linear(cfg):
        checks.append(_linear_backbone_problem)
    problems = [p for check in checks if (p := check(cfg)) is not None]
    precision = OmegaConf.select(cfg, "precision", default=None)
    if str(precision) == "auto":
        problems.append(
            "precision=auto: upstream's script passes it to Lightning as written; give "
            "precision=16-mixed on a GPU (solo-learn's configs) or precision=32 on the CPU"
        )
    return problems + _own_key_problems(cfg)


def check_method_keys(cfg: omegaconf.DictConfig) -> None:
    """A pretraining config's ``method_kwargs``, checked as the method would in upstream's task."""
    if _is_linear(cfg):
        return
    method = OmegaConf.select(cfg, "method", default=None)
    kwargs = OmegaConf.select(cfg, "method_kwargs", default=None)
    check_method_kwargs(method, kwargs)
    check_owned_keys(cfg)
    settings = METHOD_SETTINGS.get(str(method))
    if settings is not None:
        settings.check_kwargs(kwargs or {}, OmegaConf.select(cfg, "optimizer", default=None))


class UpstreamScripts(Callback):
    """Registers ``bayesncl`` and ``ncl`` before the task runs and, under upstream's scripts,
    refuses (exit status 2, one line) a config they would read differently or bad method keys."""

    def on_job_start(self, config: omegaconf.DictConfig, **kwargs: Any) -> None:
        register()
        task = kwargs.get("task_function")
        if getattr(task, "__module__", "").partition(".")[0] == _PACKAGE:
            return
        problems = upstream_problems(config)
        script = Path(sys.argv[0]).name or "the script"
        if problems:
            sys.stderr.write(
                f"{script}: error: under upstream solo-learn's script the shipped config needs: "
                + "; ".join(problems)
                + "\n"
            )
            raise SystemExit(2)
        try:
            check_method_keys(config)
        except ConfigError as err:
            sys.stderr.write(f"{script}: error: {err}\n")
            raise SystemExit(2) from None
