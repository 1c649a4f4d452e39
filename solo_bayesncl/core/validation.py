"""Checks of config values that fail with a message naming the key, the value and what is
allowed, before any training starts.

Booleans are parsed strictly: ``true``/``false`` in any of the spellings ``True``, ``False``,
``true``, ``false``, ``1``, ``0``; anything else (``no``, ``yes``, ``off``) is refused rather than
read as Python's ``bool("no") == True``. :func:`check_run_cfg` range-checks the keys every run
reads (epochs, batch size, crop sizes, data fractions, ...); :func:`require_known_keys` refuses
keys a method does not read, such as a misspelt ``method_kwargs`` entry.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import omegaconf
from omegaconf import OmegaConf

__all__ = [
    "UPSTREAM_METHOD_KWARGS",
    "ConfigError",
    "check_method_kwargs",
    "check_run_cfg",
    "check_upstream_method_kwargs",
    "parse_bool",
    "require_fraction",
    "require_int",
    "require_known_keys",
    "require_positive_int",
    "require_range",
]

UPSTREAM_METHOD_KWARGS: dict[str, tuple[str, ...]] = {
    "simclr": ("proj_hidden_dim", "proj_output_dim", "temperature"),
    "mocov2plus": ("proj_hidden_dim", "proj_output_dim", "temperature", "queue_size"),
}
"""The ``method_kwargs`` keys solo-learn's own methods read (solo-learn 1.0.6)."""

_TRUE = ("true", "1")
_FALSE = ("false", "0")


class ConfigError(ValueError):
    """A configuration value is missing or outside what is allowed."""


def require_positive_int(cfg: omegaconf.DictConfig, key: str, hint: str) -> int:
    """The integer at ``key``; raises :class:`ConfigError` when missing or not a positive int."""
    node_missing = OmegaConf.select(cfg, key, default=None, throw_on_missing=False) is None
    if node_missing:
        raise ConfigError(f"{key} is missing: {hint}")
    value = OmegaConf.select(cfg, key)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"{key}={value!r} must be a positive integer ({hint})")
    return value


def require_range(
    key: str,
    value: Any,
    low: float | None = None,
    high: float | None = None,
    low_inclusive: bool = False,
    high_inclusive: bool = False,
) -> float:
    """``value`` as float, checked against the interval; raises :class:`ConfigError` otherwise."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    ok = not math.isnan(number)
    if ok and low is not None:
        ok = number >= low if low_inclusive else number > low
    if ok and high is not None:
        ok = number <= high if high_inclusive else number < high
    if not ok:
        left = ("[" if low_inclusive else "(") + ("-inf" if low is None else f"{low:g}")
        right = ("inf" if high is None else f"{high:g}") + ("]" if high_inclusive else ")")
        raise ConfigError(f"{key}={value!r} is out of range; allowed: a number in {left}, {right}")
    return number


def parse_bool(key: str, value: Any) -> bool:
    """``value`` as a bool: ``True``/``False``, ``1``/``0`` or the strings ``true``/``false``
    (any case), ``1``/``0``; raises :class:`ConfigError` for anything else (``no``, ``2``)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
        return value.strip().lower() in _TRUE
    raise ConfigError(f"{key}={value!r} is not a boolean; allowed: true, false (or 1, 0)")


def require_int(key: str, value: Any, low: int, high: int | None = None) -> int:
    """``value`` as an int in ``[low, high]``; a float with an integer value is accepted."""
    number = value
    if isinstance(value, float) and value.is_integer():
        number = int(value)
    if isinstance(number, bool) or not isinstance(number, int) or number < low:
        ok = False
    else:
        ok = high is None or number <= high
    if not ok:
        allowed = f"an integer >= {low}" if high is None else f"an integer in [{low}, {high}]"
        raise ConfigError(f"{key}={value!r} is out of range; allowed: {allowed}")
    return number


def require_fraction(key: str, value: Any) -> float:
    """A data fraction: a number in (0, 1], or -1 for all the data."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if isinstance(value, bool) or not (number == -1 or 0 < number <= 1):
        raise ConfigError(
            f"{key}={value!r} is out of range; allowed: a number in (0, 1], or -1 for all the data"
        )
    return number


def require_known_keys(cfg: omegaconf.DictConfig, section: str, known: Iterable[str]) -> None:
    """Raises :class:`ConfigError` when the mapping at ``section`` holds keys outside ``known``
    (a misspelt key would otherwise be ignored and its default used)."""
    node = OmegaConf.select(cfg, section, default=None)
    if node is None:
        return
    known = tuple(known)
    unknown = sorted(str(k) for k in node if k not in known)
    if unknown:
        raise ConfigError(
            f"{section} has unknown key(s) {', '.join(unknown)}; known keys: "
            f"{', '.join(sorted(known))}"
        )


def check_method_kwargs(cfg: omegaconf.DictConfig, method_class: type) -> None:
    """Refuses ``method_kwargs`` keys the method does not read: the class's ``METHOD_KWARGS``
    (NCL, BayesNCL) or :data:`UPSTREAM_METHOD_KWARGS`. Called by the pretraining entry point
    only, so that checkpoints of the official codes (with their extra keys) still load."""
    method = OmegaConf.select(cfg, "method", default=None)
    known = getattr(method_class, "METHOD_KWARGS", None) or UPSTREAM_METHOD_KWARGS.get(method)
    if known is not None:
        require_known_keys(cfg, "method_kwargs", known)


def check_upstream_method_kwargs(cfg: omegaconf.DictConfig) -> None:
    """The ranges of the ``method_kwargs`` solo-learn's ``simclr`` and ``mocov2plus`` read
    (NCL and BayesNCL check their own)."""
    if OmegaConf.select(cfg, "method", default=None) not in UPSTREAM_METHOD_KWARGS:
        return
    for key in ("proj_hidden_dim", "proj_output_dim", "queue_size"):
        value = OmegaConf.select(cfg, f"method_kwargs.{key}", default=None)
        if value is not None:
            require_int(f"method_kwargs.{key}", value, low=1)
    temperature = OmegaConf.select(cfg, "method_kwargs.temperature", default=None)
    if temperature is not None:
        require_range("method_kwargs.temperature", temperature, low=0.0)


#: Boolean keys of solo-learn's configs that entry points read with ``if``.
_RUN_BOOLEANS = (
    "wandb.enabled",
    "wandb.offline",
    "checkpoint.enabled",
    "auto_resume.enabled",
    "data.no_labels",
    "performance.disable_channel_last",
    "interpretability.enabled",
)


def _set(cfg: omegaconf.DictConfig, key: str, value: Any) -> None:
    OmegaConf.update(cfg, key, value, merge=False)


def check_run_cfg(cfg: omegaconf.DictConfig) -> omegaconf.DictConfig:
    """Range checks of the keys every pretraining and linear run reads, before anything is built.

    ``max_epochs`` >= 1, ``optimizer.batch_size`` >= 1, ``optimizer.lr`` > 0 and finite,
    ``optimizer.weight_decay`` >= 0, ``optimizer.classifier_lr`` > 0, ``data.num_workers`` >= 0,
    ``data.fraction`` and ``data.val_fraction`` in (0, 1] or -1, every crop size and crop count
    >= 1, ``checkpoint.frequency`` >= 1, and the booleans above parsed strictly. Values are
    written back normalised (``"false"`` becomes ``False``).
    """

    def present(key: str) -> Any:
        return OmegaConf.select(cfg, key, default=None, throw_on_missing=False)

    for key in ("max_epochs", "optimizer.batch_size", "checkpoint.frequency"):
        if present(key) is not None:
            _set(cfg, key, require_int(key, present(key), low=1))
    if present("data.num_workers") is not None:
        _set(
            cfg, "data.num_workers", require_int("data.num_workers", present("data.num_workers"), 0)
        )
    for key in ("optimizer.lr", "optimizer.classifier_lr"):
        if present(key) is not None:
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
    return cfg
