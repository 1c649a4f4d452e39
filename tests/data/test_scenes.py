"""``fashion-mnist-scenes``: determinism, class/background independence, shapes, textures that
survive crops and flips, clear errors, and the ``data.dataset`` switch."""

from __future__ import annotations

import numpy as np
import pytest
from omegaconf import OmegaConf

from solo_bayesncl.data import scenes
from solo_bayesncl.data.fashion_mnist import fashion_mnist_root
from solo_bayesncl.data.scenes import (
    TEXTURE_NAMES,
    FashionMNISTScenes,
    assign_backgrounds,
    composite,
    texture,
)

needs_data = pytest.mark.skipif(
    not (fashion_mnist_root() / "t10k-images-idx3-ubyte.gz").is_file(),
    reason="Debian's dataset-fashion-mnist is not installed",
)


def _chi_square(a: np.ndarray, b: np.ndarray) -> tuple[float, int]:
    table = np.zeros((a.max() + 1, b.max() + 1))
    np.add.at(table, (a, b), 1)
    expected = table.sum(1, keepdims=True) * table.sum(0, keepdims=True) / table.sum()
    return float(((table - expected) ** 2 / expected).sum()), (table.shape[0] - 1) * (
        table.shape[1] - 1
    )


@pytest.mark.parametrize("k", [4, 6, 8])
def test_assignment_is_balanced_within_every_class(k):
    labels = np.random.default_rng(3).integers(0, 10, 5003)
    backgrounds = assign_backgrounds(labels, k, seed=7)
    assert backgrounds.min() == 0 and backgrounds.max() == k - 1
    for c in range(10):
        counts = np.bincount(backgrounds[labels == c], minlength=k)
        assert counts.max() - counts.min() <= 1, (c, counts)
    stat, _ = _chi_square(labels, backgrounds)
    assert stat < 1.0  # exact balance: far below any chi-square critical value


def test_assignment_is_seeded():
    labels = np.repeat(np.arange(10), 100)
    first, again = assign_backgrounds(labels, 4, 1), assign_backgrounds(labels, 4, 1)
    assert np.array_equal(first, again)
    assert not np.array_equal(first, assign_backgrounds(labels, 4, 2))


def test_composite_keeps_the_item_and_the_texture():
    items = np.zeros((3, 28, 28), np.uint8)
    items[:, 10:18, 10:18] = 255
    shifts = np.array([[0, 0], [1, 2], [5, 7]])
    out = composite(items, np.array([0, 1, 2]), shifts)
    assert out.dtype == np.uint8 and out.shape == (3, 28, 28)
    assert (out[:, 10:18, 10:18] == 255).all()  # opaque item pixels are the item
    for i, k in enumerate((0, 1, 2)):  # transparent pixels are the texture
        expected = texture(k, shifts[i : i + 1])[0]
        assert np.array_equal(out[i, :5, :5], expected[:5, :5].astype(np.uint8))


def _windows(k: int, size: int = 8) -> set[bytes]:
    """Every binarised ``size`` x ``size`` window of texture ``k`` at every phase, and its
    horizontal flip: what a small crop, a flip and any brightness/contrast change leave."""
    shifts = np.array([(dy, dx) for dy in range(12) for dx in range(12)])
    tiles = texture(k, shifts) > 75.0
    found = set()
    for tile in tiles:
        for y in range(0, 28 - size + 1, 4):
            for x in range(0, 28 - size + 1, 4):
                window = tile[y : y + size, x : x + size]
                found.add(window.tobytes())
                found.add(window[:, ::-1].tobytes())
    return found


def test_textures_stay_distinct_in_small_crops_flips_and_grayscale():
    windows = [_windows(k) for k in range(len(TEXTURE_NAMES))]
    for k in range(len(TEXTURE_NAMES)):
        for j in range(k):
            shared = windows[k] & windows[j]
            assert not shared, f"{TEXTURE_NAMES[k]} and {TEXTURE_NAMES[j]} share an 8x8 window"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_backgrounds": 3}, "num_backgrounds must be from 4 to 8, got 3"),
        ({"num_backgrounds": 9}, "num_backgrounds must be from 4 to 8, got 9"),
        ({"num_backgrounds": "6"}, "num_backgrounds must be an integer"),
        ({"num_backgrounds": True}, "num_backgrounds must be an integer"),
        ({"seed": -1}, "background seed must be a non-negative integer, got -1"),
        ({"seed": 0.5}, "background seed must be a non-negative integer"),
        ({"split": "test"}, "split='test' is not supported; allowed values: train, val"),
    ],
)
def test_bad_arguments_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        FashionMNISTScenes(**kwargs)


def test_missing_files_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="t10k-images-idx3-ubyte.*not found"):
        FashionMNISTScenes("val", root=tmp_path)


@needs_data
def test_dataset_is_deterministic_and_shaped():
    scenes._scene_arrays.cache_clear()
    val = FashionMNISTScenes("val", num_backgrounds=6, seed=3)
    first = val.images.copy(), val.backgrounds.copy()
    scenes._scene_arrays.cache_clear()
    again = FashionMNISTScenes("val", num_backgrounds=6, seed=3)
    assert np.array_equal(first[0], again.images) and np.array_equal(first[1], again.backgrounds)
    other = FashionMNISTScenes("val", num_backgrounds=6, seed=4)
    assert not np.array_equal(first[1], other.backgrounds)
    assert len(val) == 10000 and val.images.shape == (10000, 28, 28)
    assert val.background_names == list(TEXTURE_NAMES[:6])
    image, label = val[0]
    assert image.size == (28, 28) and image.mode == "RGB" and label == 9  # an ankle boot
    assert set(np.unique(val.backgrounds)) == set(range(6))
    limited = FashionMNISTScenes("val", num_backgrounds=6, seed=3, limit=100)
    assert len(limited) == 100 and np.array_equal(limited.backgrounds, first[1][:100])
    # background pixels (item exactly 0) are textured: not black like plain Fashion-MNIST
    from solo_bayesncl.data.fashion_mnist import FashionMNIST

    plain = FashionMNIST("val", limit=200).images
    assert val.images[:200][plain == 0].min() >= 30


@needs_data
def test_backgrounds_are_independent_of_classes_in_a_stratified_subset():
    from sklearn.model_selection import train_test_split

    chi2 = pytest.importorskip("scipy.stats").chi2
    train = FashionMNISTScenes("train", num_backgrounds=4, seed=0)
    for c in range(10):  # exact balance on the whole split
        counts = np.bincount(train.backgrounds[train.targets == c], minlength=4)
        assert counts.max() - counts.min() <= 1
    kept, _ = train_test_split(
        np.arange(len(train)), train_size=0.08334, stratify=train.targets, random_state=42
    )
    stat, dof = _chi_square(train.targets[kept], train.backgrounds[kept])
    assert stat < chi2.ppf(0.999, dof)


def _cfg(**data):
    return OmegaConf.create(
        {
            "data": {"dataset": "fashion-mnist-scenes", "format": "image_folder", **data},
            "augmentations": [{"crop_size": 32, "mean": [0.5] * 3, "std": [0.5] * 3}],
            "backbone": {},
        }
    )


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"num_backgrounds": 2}, "data.num_backgrounds: num_backgrounds must be from 4 to 8"),
        ({"background_seed": -3}, "data.background_seed: background seed must be"),
    ],
)
def test_bad_config_values_name_the_key(data, message):
    from solo_bayesncl.data.resolve import resolve_dataset_cfg

    with pytest.raises(ValueError, match=message):
        resolve_dataset_cfg(_cfg(**data))


@pytest.mark.solo
@needs_data
def test_dataset_switch_builds_scenes_with_their_own_statistics():
    from solo_bayesncl.data.datasets import build_labelled_train_dataset, build_val_dataset
    from solo_bayesncl.data.resolve import resolve_dataset_cfg

    cfg = _cfg(num_backgrounds=5, val_fraction=0.1, fraction=-1)
    spec = resolve_dataset_cfg(cfg)
    assert (spec.name, spec.loader) == ("fashion-mnist-scenes", "custom")
    assert cfg.data.offline_dataset == "fashion-mnist-scenes" and cfg.data.dataset == "custom"
    assert (cfg.data.num_backgrounds, cfg.data.background_seed) == (5, 0)
    train = FashionMNISTScenes("train", num_backgrounds=5)
    mean = train.images.mean() / 255
    assert list(cfg.augmentations[0].mean) == pytest.approx([mean] * 3)
    val = build_val_dataset(spec)
    assert len(val) == 1000 and val.dataset.num_backgrounds == 5
    x, y = val[0]
    assert tuple(x.shape) == (3, 32, 32) and 0 <= y < 10
    labelled = build_labelled_train_dataset(spec, None)
    assert isinstance(labelled, FashionMNISTScenes) and len(labelled) == 60000
