"""What a gate does with the background-dominated dimensions of the representation it gates."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from solo_bayesncl.metrics.background import gate_background_selectivity

CLASSES = np.array([0, 0, 0, 0, 1, 1, 1, 1])
BACKGROUNDS = np.array([0, 1, 0, 1, 0, 1, 0, 1])


def _ungated() -> torch.Tensor:
    u = torch.zeros(8, 3)
    u[:4, 0] = 1.0  # class 0 on both backgrounds: class-dominated (class lift 1, background 0)
    u[[0, 2, 4, 6], 1] = 0.5  # background 0 in both classes: background-dominated
    return u  # dimension 2 is never active


def test_open_rates_are_read_on_the_images_a_dimension_is_active_on():
    mask = torch.ones(8, 3)  # open wherever the dimension is inactive: must not count
    mask[3, 0] = 0.0  # dim 0 open on 3 of its 4 images
    mask[[2, 4, 6], 1] = 0.0  # dim 1 open on 1 of its 4
    out = gate_background_selectivity(_ungated(), mask, CLASSES, BACKGROUNDS, 2, 2)
    assert out["ungated_background_dims_share"] == pytest.approx(0.5)
    assert out["open_rate_class_dims"] == pytest.approx(0.75)
    assert out["open_rate_background_dims"] == pytest.approx(0.25)
    # lifts (background minus class) -1 and +1, open rates 0.75 and 0.25: perfectly anti-correlated
    assert out["open_rate_lift_correlation"] == pytest.approx(-1.0)


def test_a_gate_that_opens_everything_is_not_selective():
    out = gate_background_selectivity(_ungated(), torch.ones(8, 3), CLASSES, BACKGROUNDS, 2, 2)
    assert out["open_rate_class_dims"] == out["open_rate_background_dims"] == 1.0
    assert math.isnan(out["open_rate_lift_correlation"])


def test_a_group_without_dimensions_has_no_open_rate():
    u = _ungated()
    u[:, 1] = 0.0  # only the class-dominated dimension is left
    out = gate_background_selectivity(u, torch.ones(8, 3), CLASSES, BACKGROUNDS, 2, 2)
    assert out["ungated_background_dims_share"] == 0.0
    assert math.isnan(out["open_rate_background_dims"]) and out["open_rate_class_dims"] == 1.0


def test_shapes_must_match():
    with pytest.raises(ValueError, match=r"ungated \(8, 3\) and mask \(8, 2\) must be the same"):
        gate_background_selectivity(_ungated(), torch.ones(8, 2), CLASSES, BACKGROUNDS, 2, 2)


def test_gate_probabilities_are_averaged_on_the_images_a_dimension_is_active_on():
    probs = torch.full((8, 3), 0.5)  # 0.5 wherever the dimension is inactive: must not count
    probs[:4, 0] = torch.tensor([0.9, 0.9, 0.8, 0.6])  # class-dominated: mean 0.8
    probs[[0, 2, 4, 6], 1] = torch.tensor([1.0, 1.0, 0.95, 0.85])  # background-dominated: 0.95
    out = gate_background_selectivity(
        _ungated(), torch.ones(8, 3), CLASSES, BACKGROUNDS, 2, 2, probs=probs
    )
    assert out["gate_probability_class_dims"] == pytest.approx(0.8)
    assert out["gate_probability_background_dims"] == pytest.approx(0.95)
    # every gate open at the threshold, so the hard open rates cannot tell the groups apart
    assert out["open_rate_class_dims"] == out["open_rate_background_dims"] == 1.0
    without = gate_background_selectivity(_ungated(), torch.ones(8, 3), CLASSES, BACKGROUNDS, 2, 2)
    assert "gate_probability_class_dims" not in without


def test_probabilities_must_have_the_representations_shape():
    with pytest.raises(ValueError, match=r"ungated \(8, 3\) and probs \(8, 2\) must be the same"):
        gate_background_selectivity(
            _ungated(), torch.ones(8, 3), CLASSES, BACKGROUNDS, 2, 2, probs=torch.ones(8, 2)
        )
