"""Checks of config values that fail with a message naming the key, the value and what is
allowed, before any training starts."""

from __future__ import annotations

import math
from typing import Any

import omegaconf
from omegaconf import OmegaConf

__all__ = [
    "ConfigError",
    "require_positive_int",
    "require_range",
]


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
