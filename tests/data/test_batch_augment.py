"""The batched augmentation path (``data.augment_on=batch``) against solo-learn's per-image
transforms: the same distributions, drawn independently for every image.

Both paths augment the same probe images with the same recipe; statistics of many outputs are
compared within the tolerances stated below. The two-sample Kolmogorov-Smirnov distance between
``n`` = 1000 samples per side is below 0.087 with probability 0.999 when both sides come from one
distribution; the tolerances add a margin for the two resamplers (PIL's bicubic kernel and
box-filter blur against PyTorch's bicubic ``grid_sample`` and kornia's Gaussian kernel). A
transform that draws one set of parameters per batch fails them (the last test shows it).
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from solo_bayesncl.data.batch_augment import BatchAugmentation, MultiViewAugmentation, Recipe

N = 1000
KS_MAX = 0.11  # distributions (crop area, aspect, position, per-image mean/std/colourfulness)
SHARE_TOL = 0.05  # shares of flipped, grayscale, solarized images (binomial sd ~0.012-0.014)
MEAN_TOL = 0.02  # per-channel pixel means, in [0, 1] pixel units
VAR_RTOL = 0.08  # per-channel pixel variances, relative

RECIPE = {  # the shipped CIFAR recipe, with solarization on so that it is compared too
    "crop_size": 32,
    "num_crops": 1,
    "rrc": {"enabled": True, "crop_min_scale": 0.08, "crop_max_scale": 1.0},
    "color_jitter": {
        "prob": 0.8,
        "brightness": 0.8,
        "contrast": 0.8,
        "saturation": 0.8,
        "hue": 0.2,
    },
    "grayscale": {"prob": 0.2},
    "gaussian_blur": {"prob": 0.5},
    "solarization": {"prob": 0.2},
    "equalization": {"prob": 0.0},
    "horizontal_flip": {"prob": 0.5},
    "mean": [0.0, 0.0, 0.0],
    "std": [1.0, 1.0, 1.0],
}


def _recipe(**changes) -> dict:
    aug = OmegaConf.to_container(OmegaConf.create(RECIPE))
    for key, value in changes.items():
        node = aug
        *parents, last = key.split(".")
        for part in parents:
            node = node[part]
        node[last] = value
    return aug


def _ks(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sample Kolmogorov-Smirnov distance."""
    grid = np.sort(np.concatenate([a, b]))
    fa = np.searchsorted(np.sort(a), grid, side="right") / len(a)
    fb = np.searchsorted(np.sort(b), grid, side="right") / len(b)
    return float(np.abs(fa - fb).max())


def _colour_images(n: int, size: int, seed: int) -> np.ndarray:
    """``(n, size, size, 3)`` uint8: smooth random colour fields (bilinear 4x4 grids) with noise,
    so that crops, colour jitter, grayscale and blur all change something."""
    g = torch.Generator().manual_seed(seed)
    coarse = torch.rand(n, 3, 4, 4, generator=g)
    fields = torch.nn.functional.interpolate(coarse, size=(size, size), mode="bilinear")
    fields = fields + 0.08 * torch.randn(n, 3, size, size, generator=g)
    return (fields.clamp(0, 1) * 255).round().byte().permute(0, 2, 3, 1).numpy()


def _ramp_images(n: int, size: int) -> np.ndarray:
    """``(n, size, size, 3)`` uint8: red is the column, green the row (pixel centres), blue 128,
    so that a view's red and green slopes measure its crop box and flip."""
    centres = (np.arange(size) + 0.5) / size
    image = np.empty((size, size, 3), np.uint8)
    image[..., 0] = np.round(centres[None, :] * 255)
    image[..., 1] = np.round(centres[:, None] * 255)
    image[..., 2] = 128
    return np.repeat(image[None], n, axis=0)


def _per_image(aug: dict, images: np.ndarray, dataset: str = "custom") -> torch.Tensor:
    """solo-learn's transforms, one PIL image at a time (as its data module applies them)."""
    from PIL import Image
    from solo.data.pretrain_dataloader import build_transform_pipeline

    transform = build_transform_pipeline(dataset, OmegaConf.create(aug))
    torch.manual_seed(0)
    random.seed(0)
    mode = "L" if images.ndim == 3 else "RGB"
    return torch.stack([transform(Image.fromarray(im, mode=mode).convert("RGB")) for im in images])


def _batched(aug: dict, images: np.ndarray, dataset: str = "custom") -> torch.Tensor:
    """The batched path on the whole set in one call (so parameters must vary within a batch)."""
    from solo_bayesncl.data.names import solo_normalization

    mean, std = solo_normalization(dataset, aug.get("mean"), aug.get("std"))
    x = torch.from_numpy(images)
    x = x[:, None] if x.ndim == 3 else x.permute(0, 3, 1, 2)
    torch.manual_seed(1)
    with torch.no_grad():
        return BatchAugmentation(Recipe.from_cfg(OmegaConf.create(aug), mean, std))(x.contiguous())


def _geometry(views: torch.Tensor, size: int) -> dict[str, np.ndarray]:
    """Crop width and height (fractions of the image), centre and flip, from the slopes of the
    red and green ramps over the middle half of each view (away from replicated borders)."""
    out = views.shape[-1]
    mid = slice(out // 4, out - out // 4)
    j = torch.arange(out, dtype=torch.float64)[mid]
    red = views[:, 0, mid, mid].double().mean(1)  # (n, columns)
    green = views[:, 1, mid, mid].double().mean(2)  # (n, rows)

    def slope(v: torch.Tensor) -> torch.Tensor:
        jc = j - j.mean()
        return ((v - v.mean(1, keepdim=True)) * jc).sum(1) / (jc * jc).sum()

    sx, sy = slope(red) * out, slope(green) * out  # crop side / image side (signed)
    return {
        "area": (sx.abs() * sy.abs()).numpy(),
        "log_aspect": torch.log(sx.abs() / sy.abs()).numpy(),
        "centre_x": views[:, 0].double().mean((1, 2)).numpy(),
        "centre_y": views[:, 1].double().mean((1, 2)).numpy(),
        "flipped": (sx < 0).numpy(),
    }


def _compare_geometry(a: dict, b: dict) -> list[str]:
    problems = []
    for key in ("area", "log_aspect", "centre_x", "centre_y"):
        d = _ks(a[key], b[key])
        if d > KS_MAX:
            problems.append(f"{key}: KS {d:.3f} > {KS_MAX}")
    shares = a["flipped"].mean(), b["flipped"].mean()
    if abs(shares[0] - shares[1]) > SHARE_TOL:
        problems.append(f"flipped share {shares[0]:.3f} vs {shares[1]:.3f}")
    return problems


@pytest.fixture(scope="module")
def solo_learn():
    return pytest.importorskip(
        "solo.data.pretrain_dataloader", reason="solo-learn is not installed"
    )


@pytest.fixture(scope="module")
def ramp_reference(solo_learn):
    """Fashion-MNIST-sized (28 px) ramp probes and their geometry through solo-learn."""
    images = _ramp_images(N, 28)
    return images, _geometry(_per_image(_geometry_recipe(), images), 28)


def _geometry_recipe() -> dict:
    off = {f"{k}.prob": 0.0 for k in ("color_jitter", "grayscale", "gaussian_blur", "solarization")}
    return _recipe(**off)


def test_crop_area_aspect_position_and_flip_match_solo_learn(solo_learn, ramp_reference):
    size = 28
    images, ref = ramp_reference
    new = _geometry(_batched(_geometry_recipe(), images), size)
    assert not _compare_geometry(ref, new)
    # the estimate is sound: crop areas in torchvision's scale range, flips near p
    assert 0.06 < np.median(ref["area"]) < 0.8 and abs(ref["flipped"].mean() - 0.5) < SHARE_TOL


def _colour_stats(views: torch.Tensor, mean, std) -> dict[str, np.ndarray]:
    x = views * torch.tensor(std).view(1, 3, 1, 1) + torch.tensor(mean).view(1, 3, 1, 1)
    spread = (x.amax(1) - x.amin(1)).flatten(1)  # per pixel: max - min over channels
    return {
        "channel_mean": x.mean((0, 2, 3)).numpy(),
        "channel_var": x.var((0, 2, 3)).numpy(),
        "image_mean": x.mean((1, 2, 3)).numpy(),
        "image_std": x.std((1, 2, 3)).numpy(),
        "colourfulness": spread.mean(1).numpy(),
        "gray": (spread.amax(1) < 1.5 / 255).numpy(),
        "sharpness": (x[..., 1:] - x[..., :-1]).abs().mean((1, 2, 3)).numpy(),
    }


def _compare_colour(a: dict, b: dict) -> list[str]:
    problems = []
    diff = np.abs(a["channel_mean"] - b["channel_mean"])
    if diff.max() > MEAN_TOL:
        problems.append(f"channel means {a['channel_mean']} vs {b['channel_mean']}")
    rel = np.abs(a["channel_var"] / b["channel_var"] - 1)
    if rel.max() > VAR_RTOL:
        problems.append(f"channel variances {a['channel_var']} vs {b['channel_var']}")
    for key in ("image_mean", "image_std", "colourfulness", "sharpness"):
        d = _ks(a[key], b[key])
        if d > KS_MAX:
            problems.append(f"{key}: KS {d:.3f} > {KS_MAX}")
    shares = a["gray"].mean(), b["gray"].mean()
    if abs(shares[0] - shares[1]) > SHARE_TOL:
        problems.append(f"grayscale share {shares[0]:.3f} vs {shares[1]:.3f}")
    return problems


def test_colour_recipe_matches_solo_learn_on_colour_images(solo_learn):
    """CIFAR-like 32 px colour images, full recipe, normalised with solo-learn's CIFAR-100 table."""
    from solo_bayesncl.data.names import solo_normalization

    aug = _recipe()
    images = _colour_images(N, 32, seed=3)
    mean, std = solo_normalization("cifar100", aug.get("mean"), aug.get("std"))
    assert mean != [0.0, 0.0, 0.0]  # solo-learn's table, not the recipe's mean
    ref = _colour_stats(_per_image(aug, images, "cifar100"), mean, std)
    new = _colour_stats(_batched(aug, images, "cifar100"), mean, std)
    assert not _compare_colour(ref, new)
    assert abs(ref["gray"].mean() - 0.2) < SHARE_TOL  # grayscale detected as intended


def test_gray_images_match_solo_learn(solo_learn):
    """Fashion-MNIST-like single-channel 28 px images: the batched path keeps one channel until
    normalisation; solo-learn sees the same pixels as RGB."""
    aug = _recipe()
    images = _colour_images(N, 28, seed=4)[..., 0]
    ref = _colour_stats(_per_image(aug, images), [0.0] * 3, [1.0] * 3)
    new = _colour_stats(_batched(aug, images), [0.0] * 3, [1.0] * 3)
    assert not _compare_colour(ref, new)
    assert new["gray"].all()


def test_solarization_and_blur_shares_match_solo_learn(solo_learn):
    """8 px blocks of 200 and 40 without crop or jitter: a solarized view has no value above
    128/255; blur softens the block edges by an amount set by its sigma."""
    aug = _recipe(**{"rrc.enabled": False, "color_jitter.prob": 0.0, "grayscale.prob": 0.0})
    blocks = (np.indices((32, 32)) // 8).sum(0) % 2
    images = np.repeat(np.where(blocks, 200, 40).astype(np.uint8)[None, ..., None], N, 0)
    images = np.repeat(images, 3, axis=3)
    ref, new = _per_image(aug, images), _batched(aug, images)
    solarized = [float((v.amax((1, 2, 3)) < 0.5).float().mean()) for v in (ref, new)]
    assert abs(solarized[0] - 0.2) < SHARE_TOL and abs(solarized[0] - solarized[1]) < SHARE_TOL
    sharp = [_colour_stats(v, [0.0] * 3, [1.0] * 3)["sharpness"] for v in (ref, new)]
    assert _ks(*sharp) < KS_MAX
    blurred = [float((s < 0.99 * s.max()).mean()) for s in sharp]
    assert abs(blurred[0] - blurred[1]) < SHARE_TOL


def test_one_draw_per_batch_fails_the_comparison(ramp_reference):
    """The negative control: torchvision's v2 transforms on a batch tensor draw one crop and one
    flip for the whole batch; the geometry comparison rejects them."""
    from torchvision.transforms import v2

    images, ref = ramp_reference
    batch = torch.from_numpy(images).permute(0, 3, 1, 2).float() / 255
    torch.manual_seed(0)
    per_batch = v2.Compose([v2.RandomResizedCrop(32, scale=(0.08, 1.0)), v2.RandomHorizontalFlip()])
    problems = _compare_geometry(ref, _geometry(per_batch(batch), 28))
    assert any(p.startswith("area") for p in problems) and any("flipped" in p for p in problems)


def test_views_shape_range_and_independence_without_solo_learn():
    """Runs on any device (CUDA too); parameters differ between the images of one call and
    between the two views of one image."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    mean, std = (0.5, 0.4, 0.3), (0.2, 0.25, 0.3)
    aug = MultiViewAugmentation(
        [Recipe.from_cfg(OmegaConf.create(_recipe(num_crops=2)), mean, std)]
    )
    images = torch.from_numpy(_ramp_images(256, 28)).permute(0, 3, 1, 2).contiguous().to(device)
    torch.manual_seed(0)
    v1, v2 = aug(images)
    assert v1.shape == v2.shape == (256, 3, 32, 32) and v1.dtype == torch.float32
    assert v1.device.type == device.type
    low = (0 - torch.tensor(mean)) / torch.tensor(std)
    high = (1 - torch.tensor(mean)) / torch.tensor(std)
    pixels = v1.permute(1, 0, 2, 3).flatten(1).cpu()
    assert (pixels.amin(1) >= low - 1e-4).all() and (pixels.amax(1) <= high + 1e-4).all()
    assert v1.std(0).mean() > 0.1  # images of one call differ (same input image)
    assert (v1 - v2).abs().flatten(1).amax(1).min() > 0  # every image's two views differ


def test_gray_input_gives_three_equal_channels():
    recipe = Recipe.from_cfg(OmegaConf.create(_recipe()), (0.0,) * 3, (1.0,) * 3)
    images = torch.from_numpy(_colour_images(64, 28, seed=5)[..., :1]).permute(0, 3, 1, 2)
    views = BatchAugmentation(recipe)(images.contiguous())
    assert views.shape == (64, 3, 32, 32)
    assert torch.equal(views[:, 0], views[:, 1]) and torch.equal(views[:, 1], views[:, 2])


def test_bad_input_and_recipe_errors():
    recipe = Recipe.from_cfg(OmegaConf.create(_recipe()), (0.0,) * 3, (1.0,) * 3)
    with pytest.raises(ValueError, match="expects uint8 images of shape"):
        BatchAugmentation(recipe)(torch.rand(2, 3, 32, 32))
    with pytest.raises(ValueError, match="equalization.prob > 0 .*data.augment_on=per_image"):
        BatchAugmentation(
            Recipe.from_cfg(
                OmegaConf.create(_recipe(**{"equalization.prob": 0.1})), [0] * 3, [1] * 3
            )
        )
    broken = _recipe()
    del broken["grayscale"]
    with pytest.raises(ValueError, match="missing the key 'grayscale.prob'"):
        Recipe.from_cfg(OmegaConf.create(broken), [0] * 3, [1] * 3)
