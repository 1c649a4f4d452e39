"""The top images of a dimension and the purity of its top images, against a plain loop."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from solo_bayesncl.metrics import EPS, TOP_IMAGES, top_image_purity, top_images


def _loop_top(features: np.ndarray, dim: int, count: int) -> list[int]:
    """Images whose row-normalised |value| exceeds EPS, by |value| descending, index ascending."""
    norms = np.linalg.norm(features.astype(np.float64), axis=1)
    firing = [
        i for i in range(len(features)) if norms[i] > 0 and abs(features[i, dim]) / norms[i] > EPS
    ]
    return sorted(firing, key=lambda i: (-abs(float(features[i, dim])), i))[:count]


def _loop_purity(labels: np.ndarray, rows: list[int], majority: int) -> float:
    return sum(labels[i] == majority for i in rows) / len(rows) if rows else 0.0


@pytest.fixture
def signed():
    rng = np.random.default_rng(3)
    feats = rng.normal(size=(40, 6)).astype(np.float32)
    feats[rng.random((40, 6)) < 0.5] = 0.0
    feats[:, 4] = 0.0  # never fires
    feats[:, 5] = np.where(np.arange(40) < 3, 1.0, 0.0)  # fires on 3 images only, a tie
    feats[5, 0] = feats[7, 0] = 9.0  # a tie at the top: lower index first
    feats[9, 1] = -9.0  # signed: the largest |activation| leads, its sign is kept
    labels = rng.integers(0, 3, 40)
    return feats, labels


def test_top_images_equal_a_loop_with_ties_padding_and_signs(signed):
    feats, labels = signed
    top = top_images(feats, 5)
    assert top.index.shape == (6, 5) and top.dims.tolist() == list(range(6))
    for d in range(6):
        expected = _loop_top(feats, d, 5)
        assert top.index[d].tolist() == expected + [-1] * (5 - len(expected)), d
        np.testing.assert_array_equal(
            top.value[d].numpy(), [feats[i, d] for i in expected] + [0.0] * (5 - len(expected))
        )
    assert top.index[0, :2].tolist() == [5, 7]
    assert top.index[1, 0] == 9 and top.value[1, 0] == -9.0


def test_chosen_dims_keep_their_order_and_the_default_count(signed):
    feats, _ = signed
    top = top_images(torch.from_numpy(feats), dims=[3, 0])
    assert top.dims.tolist() == [3, 0] and top.index.shape == (2, TOP_IMAGES)
    assert top.index[0].tolist() == top_images(feats, TOP_IMAGES).index[3].tolist()
    reversed_view = np.arange(6)[::-1][:2]  # the report's least selective: a reversed view
    assert top_images(feats, dims=reversed_view).dims.tolist() == [5, 4]


def test_purity_of_the_top_images_equals_a_loop(signed):
    feats, labels = signed
    top = top_images(feats, 5)
    majority = [0, 1, 2, 0, 1, 2]
    purity = top_image_purity(top.index, labels, majority)
    for d in range(6):
        expected = _loop_purity(labels, _loop_top(feats, d, 5), majority[d])
        assert purity[d].item() == pytest.approx(expected), d
    assert purity[4] == 0.0  # never fires: no image, purity 0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"count": 0}, r"count must be an int >= 1"),
        ({"dims": [7]}, r"dims must be a 1-D list of dimensions in 0\.\.5"),
    ],
)
def test_bad_arguments_are_named(signed, kwargs, message):
    with pytest.raises(ValueError, match=message):
        top_images(signed[0], **kwargs)
