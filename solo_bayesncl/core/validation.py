"""Checks that refuse a value before any training starts with a message naming the key, the value
and what is allowed. Booleans are parsed strictly (``no`` is refused, not read as True);
:data:`INPUT_ERRORS` are what a bad input raises while a run is prepared, :func:`first_line`
their one-line message."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import omegaconf

__all__ = [
    "INPUT_ERRORS",
    "MIN_TEMPERATURE",
    "ConfigError",
    "describe_int",
    "describe_range",
    "first_line",
    "parse_bool",
    "require_choice",
    "require_fraction",
    "require_int",
    "require_known_keys",
    "require_range",
    "require_temperature",
]

MIN_TEMPERATURE: float = 1e-4
"""Smallest temperature accepted (InfoNCE's ``T``, the gate's ``tau_g``): logits and gradients
scale with ``1 / T``, which stays within float16's range (65504) above it, so a mixed-precision
step cannot overflow from the temperature alone; ``1e-40`` would make ``1 / T`` infinite."""

_TRUE = ("true", "1")
_FALSE = ("false", "0")


class ConfigError(ValueError):
    """A configuration value is missing or outside what is allowed."""


INPUT_ERRORS: tuple[type[BaseException], ...] = (
    ValueError,  # config checks, CheckpointError
    FileNotFoundError,  # data files
    NotADirectoryError,  # an output folder that is a file
    PermissionError,  # NotWritableError: an output that cannot be written
    RuntimeError,  # DatasetUnavailableError, accelerator=gpu without a GPU
    AssertionError,  # solo-learn's parse_cfg checks with assert
    omegaconf.errors.OmegaConfBaseException,  # a missing or mistyped key
)
"""What a bad config or missing input raises while a run is being prepared."""


def first_line(err: BaseException) -> str:
    """The message of ``err`` as one line: its first line, without the key context omegaconf
    appends; the exception's type name when it has no message."""
    message = str(err).strip().partition("\n    full_key:")[0]
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    return lines[0] if lines else type(err).__name__


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
        allowed = describe_range(low, high, low_inclusive, high_inclusive)
        raise ConfigError(f"{key}={value!r} is out of range; allowed: {allowed}")
    return number


def describe_range(
    low: float | None = None,
    high: float | None = None,
    low_inclusive: bool = False,
    high_inclusive: bool = False,
) -> str:
    """What :func:`require_range` allows, in the words of its message: ``a number in (0, 1)``."""
    left = ("[" if low_inclusive else "(") + ("-inf" if low is None else f"{low:g}")
    right = ("inf" if high is None else f"{high:g}") + ("]" if high_inclusive else ")")
    return f"a number in {left}, {right}"


def require_temperature(key: str, value: Any) -> float:
    """A temperature: a finite number >= :data:`MIN_TEMPERATURE`."""
    return require_range(key, value, low=MIN_TEMPERATURE, high=math.inf, low_inclusive=True)


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
        raise ConfigError(f"{key}={value!r} is out of range; allowed: {describe_int(low, high)}")
    return number


def describe_int(low: int, high: int | None = None) -> str:
    """What :func:`require_int` allows, in the words of its message: ``an integer >= 1``."""
    return f"an integer >= {low}" if high is None else f"an integer in [{low}, {high}]"


def require_choice(key: str, value: Any, allowed: Iterable[str]) -> str:
    """``value`` if one of ``allowed`` (as strings), else :class:`ConfigError` naming them."""
    allowed = tuple(str(a) for a in allowed)
    if str(value) not in allowed:
        raise ConfigError(f"{key}={value!r} is not supported; allowed values: {', '.join(allowed)}")
    return str(value)


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


def require_known_keys(section: str, node: Mapping[str, Any] | None, known: Iterable[str]) -> None:
    """Raises :class:`ConfigError` when ``node`` (the config's ``section``; None passes) holds keys
    outside ``known``: a misspelt key would otherwise be ignored."""
    if node is None:
        return
    known = tuple(known)
    unknown = sorted(str(k) for k in node if k not in known)
    if unknown:
        raise ConfigError(
            f"{section} has unknown key(s) {', '.join(unknown)}; known keys: "
            f"{', '.join(sorted(known))}"
        )
