"""The JSON text the project writes: strict JSON (RFC 8259), an undefined figure written as
``null`` rather than Python's ``NaN``, which ``jq``, browsers and most other readers refuse."""

from __future__ import annotations

import json
import math
import numbers
from typing import Any

__all__ = ["finite_or_null", "json_text"]


def finite_or_null(value: Any) -> Any:
    """``value`` with every number (numpy and torch scalars too) a Python ``int``/``float``, every
    non-finite one ``None``, through nested dicts, lists and tuples (which become lists)."""
    if isinstance(value, dict):
        return {key: finite_or_null(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [finite_or_null(item) for item in value]
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real) or hasattr(value, "__float__"):
        number = float(value)
        return number if math.isfinite(number) else None
    return value


def json_text(data: Any, indent: int | None = 2) -> str:
    """``data`` as strict JSON text ending in a newline, its non-finite numbers as ``null``."""
    return json.dumps(finite_or_null(data), indent=indent, allow_nan=False) + "\n"
