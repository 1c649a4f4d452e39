"""What each hyperparameter of the losses allows, declared once (:data:`RANGES`): the losses
check their arguments against it and :mod:`solo_bayesncl.methods.keys` the config, so a bad value
gets the same one-line message in a config and in a call."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from solo_bayesncl.core.validation import (
    MIN_TEMPERATURE,
    describe_int,
    describe_range,
    parse_bool,
    require_int,
    require_range,
    require_temperature,
)

__all__ = ["FLAG", "RANGES", "TEMPERATURE", "Rule", "checked", "integer", "number"]


@dataclass(frozen=True)
class Rule:
    """What a hyperparameter allows: ``check(key, value)`` returns the value normalised or raises
    a ``ConfigError`` naming ``key``; ``allowed`` says it in words (the docstring table)."""

    check: Callable[[str, Any], Any]
    allowed: str


def number(low: float, high: float, low_inclusive: bool = False) -> Rule:
    """A finite number in the interval (``high`` excluded)."""
    check = partial(require_range, low=low, high=high, low_inclusive=low_inclusive)
    return Rule(check, describe_range(low, high, low_inclusive))


def integer(low: int) -> Rule:
    """An integer >= ``low``."""
    return Rule(partial(require_int, low=low), describe_int(low))


TEMPERATURE = Rule(require_temperature, describe_range(MIN_TEMPERATURE, math.inf, True))
FLAG = Rule(parse_bool, "true or false (or 1, 0)")

RANGES: dict[str, Rule] = {
    "temperature": TEMPERATURE,
    "topk_k": integer(1),
    "dimension_dropout": number(0.0, 1.0, low_inclusive=True),
    "bayesian_prior_prob": number(0.0, 1.0),
    "gate_threshold": number(0.0, 1.0),
    "sigmoid_temperature": TEMPERATURE,
    "bayesian_kl_lambda": number(0.0, math.inf, low_inclusive=True),
    "kl_eps": number(0.0, 0.5),
    "use_kl": FLAG,
}
"""The allowed values of each numeric or boolean hyperparameter, by its config name (the
choices ``non_neg`` and ``gate_type`` are declared with their maps and gates)."""


def checked(name: str, value: Any, key: str | None = None) -> Any:
    """``value`` normalised by the rule of hyperparameter ``name`` (:data:`RANGES`); a bad one
    raises :class:`~solo_bayesncl.core.validation.ConfigError` naming ``key`` (default ``name``)."""
    return RANGES[name].check(key or name, value)
