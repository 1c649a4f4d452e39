"""The project's JSON is strict: an undefined figure is written as null, never as NaN."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from solo_bayesncl.io.json_text import finite_or_null, json_text


def strict_loads(text: str):
    """json.loads refusing the NaN/Infinity words, as jq and browsers do."""

    def refuse(word: str):
        raise ValueError(f"not JSON: {word}")

    return json.loads(text, parse_constant=refuse)


def test_non_finite_numbers_become_null_at_any_depth():
    data = {
        "r": math.nan,
        "nested": {"up": math.inf, "down": -math.inf, "kept": 0.25},
        "seq": (1.5, float("nan"), [math.inf, 2]),
        "name": "ncl",
        "flag": True,
        "none": None,
    }
    assert finite_or_null(data) == {
        "r": None,
        "nested": {"up": None, "down": None, "kept": 0.25},
        "seq": [1.5, None, [None, 2]],
        "name": "ncl",
        "flag": True,
        "none": None,
    }
    assert strict_loads(json_text(data))["nested"] == {"up": None, "down": None, "kept": 0.25}


def test_numpy_and_torch_scalars_are_written_as_plain_numbers():
    data = {
        "i": np.int64(7),
        "f": np.float32(0.5),
        "nan32": np.float32("nan"),
        "t": torch.tensor(0.75),
        "tnan": torch.tensor(float("nan")),
    }
    out = finite_or_null(data)
    assert out == {"i": 7, "f": 0.5, "nan32": None, "t": 0.75, "tnan": None}
    assert type(out["i"]) is int and type(out["f"]) is float
    assert strict_loads(json_text(data)) == out


def test_the_text_ends_in_a_newline_and_booleans_stay_booleans():
    text = json_text({"ok": False, "n": 3}, indent=None)
    assert text == '{"ok": false, "n": 3}\n'


def test_a_value_json_cannot_hold_is_a_type_error():
    with pytest.raises(TypeError, match="not JSON serializable"):
        json_text({"where": object()})
