"""A checkpoint's saved config (its ``args.json``, a zoo artifact's ``cfg``) read into its
:class:`~solo_bayesncl.config.settings.RunSpec`: the official codes' method names and gate flags
read as the plugin's, then :func:`~solo_bayesncl.config.settings.saved_run_spec`. The one place a
checkpoint's config keys are read."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from solo_bayesncl.config.settings import RunSpec, saved_run_spec
from solo_bayesncl.data.resolve import resolve_dataset_cfg
from solo_bayesncl.host.registration import SUPPORTED_METHODS

__all__ = [
    "SavedConfigError",
    "checkpoint_spec",
    "official_method_name",
    "saved_model",
    "switched_dataset",
]


class SavedConfigError(ValueError):
    """A saved config no supported model can be built from (``in_config``: a key it lacks)."""

    def __init__(self, message: str, in_config: bool) -> None:
        super().__init__(message)
        self.in_config = in_config


def _truthy(value: Any) -> bool:
    return value is True or str(value).lower() == "true"


def _gated(weights: Iterable[str]) -> bool:
    return any(k.startswith("gating_head.") for k in weights)


def _gate_flags(cfg: dict[str, Any], weights: Iterable[str]) -> None:
    """A gated checkpoint has ``use_bayes: True`` (the official meaning: a gate exists); a
    ``use_bayes: False`` beside a gating head is this plugin's former spelling of ``use_kl``."""
    kwargs = cfg.get("method_kwargs")
    if not isinstance(kwargs, dict) or not _gated(weights):
        return
    if "use_kl" not in kwargs:
        kwargs["use_kl"] = _truthy(kwargs.get("use_bayes", True))
    kwargs["use_bayes"] = True


def official_method_name(cfg: dict[str, Any], weights: Iterable[str]) -> str:
    """The plugin method a config of the official codes means (``simclr`` + gate -> bayesncl,
    ``simclr`` + ``non_neg`` -> ncl); gated only by a gating head (``weights``) or ``use_bayes``."""
    method = str(cfg.get("method", ""))
    kwargs = cfg.get("method_kwargs") or {}
    if method == "simclr":
        if _gated(weights) or _truthy(kwargs.get("use_bayes")):
            return "bayesncl"
        if str(kwargs.get("non_neg")).lower() not in ("none", "null"):  # YAML None is "None"
            return "ncl"
    return method


def saved_model(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The ``method``, ``backbone`` and ``dataset`` a saved config names (None where none)."""
    spec = saved_run_spec(cfg)
    return {
        "method": spec.method.name,
        "backbone": spec.method.backbone,
        "dataset": spec.data.name or None,
    }


def switched_dataset(spec: RunSpec, dataset: str | Path | None) -> RunSpec:
    """A checkpoint's ``spec`` with its data switched to ``dataset``, resolved: a dataset name or
    an image folder (validation images with labels); None keeps the checkpoint's own."""
    if dataset is None:
        return spec
    cfg = spec.solo.copy()
    folder = Path(str(dataset))
    cfg.data.pop("offline_dataset", None)
    if folder.is_dir():
        cfg.data.dataset = "custom"
        cfg.data.format = "image_folder"
        cfg.data.val_path = str(folder)
        cfg.data.no_labels = False
    else:
        cfg.data.dataset = str(dataset)
    return dataclasses.replace(spec, data=resolve_dataset_cfg(cfg), solo=cfg)


def checkpoint_spec(cfg: dict[str, Any], weights: Iterable[str]) -> RunSpec:
    """The spec of a checkpoint's saved config ``cfg`` (normalised in place), ``weights`` its weight
    names; :class:`SavedConfigError` for an unbuildable method, dataset or backbone."""
    names = list(weights)
    method = official_method_name(cfg, names)
    if method not in SUPPORTED_METHODS:
        raise SavedConfigError(
            f"method {cfg.get('method')!r} is not supported; allowed: {', '.join(SUPPORTED_METHODS)}",
            in_config=False,
        )
    for section, key in (("data", "dataset"), ("backbone", "name")):
        node = cfg.get(section)
        if not isinstance(node, dict) or not node.get(key):
            raise SavedConfigError(
                f"the config has no {section}.{key}, which says what the model was trained "
                f"{'on' if section == 'data' else 'with'}; is it the args.json of a pretraining "
                "run?",
                in_config=True,
            )
    cfg["method"] = method
    if method == "bayesncl":
        _gate_flags(cfg, names)
    cfg.pop("wandb_run_id", None)
    spec = saved_run_spec(cfg)
    OmegaConf.set_struct(spec.solo, False)
    return spec
