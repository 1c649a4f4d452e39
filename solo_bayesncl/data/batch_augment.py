"""solo-learn's pretraining augmentations (``solo.data.pretrain_dataloader.
build_transform_pipeline``) applied to whole ``(B, C, H, W)`` uint8 batches on their device, every
random parameter drawn per image and per view (kornia's samplers with ``same_on_batch=False``, and
``torch.rand``), from torch's global generator, which the training seeds per rank and batch.

The crop box is kornia's ``RandomResizedCrop`` sampler, resampled with PIL's half-pixel
convention by one bicubic ``grid_sample``; the colour-jitter order is drawn per image, as
torchvision does; single-channel images stay so until normalisation. Equalization is refused.
Differences from solo-learn's per-image path: docs/fidelity.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "BatchAugmentation",
    "MultiViewAugmentation",
    "Recipe",
    "unsupported_reason",
]

BLUR_SIGMA = (0.1, 2.0)
"""solo-learn's ``GaussianBlur`` default range of the standard deviation (pixels)."""
SOLARIZE_THRESHOLD = 128 / 255
"""PIL's ``ImageOps.solarize`` default: values at or above 128 are inverted."""
CROP_RATIO = (3 / 4, 4 / 3)
"""torchvision's ``RandomResizedCrop`` default aspect-ratio range (solo-learn keeps it)."""


def _node(cfg: Any, key: str) -> Any:
    """``cfg.<key>`` for a dotted key, with an error naming it when missing."""
    value = cfg
    for part in key.split("."):
        try:
            value = value[part]
        except (KeyError, TypeError, AttributeError):
            value = None
        if value is None:
            raise ValueError(f"augmentation pipeline is missing the key {key!r}")
    return value


@dataclass(frozen=True)
class Recipe:
    """One solo-learn augmentation pipeline (one entry of the ``augmentations`` list)."""

    crop_size: int
    num_crops: int
    rrc: bool
    crop_scale: tuple[float, float]
    jitter_prob: float
    brightness: float
    contrast: float
    saturation: float
    hue: float
    grayscale_prob: float
    blur_prob: float
    solarization_prob: float
    equalization_prob: float
    flip_prob: float
    mean: tuple[float, ...]
    std: tuple[float, ...]

    @classmethod
    def from_cfg(cls, aug: Any, mean: Sequence[float], std: Sequence[float]) -> Recipe:
        """Reads the keys solo-learn's ``build_transform_pipeline`` reads, with the same meaning
        (``rrc.enabled`` False means a plain bicubic resize to ``crop_size``)."""
        rrc = bool(_node(aug, "rrc.enabled"))
        scale = (
            (float(_node(aug, "rrc.crop_min_scale")), float(_node(aug, "rrc.crop_max_scale")))
            if rrc
            else (1.0, 1.0)
        )
        return cls(
            crop_size=int(_node(aug, "crop_size")),
            num_crops=int(_node(aug, "num_crops")),
            rrc=rrc,
            crop_scale=scale,
            jitter_prob=float(_node(aug, "color_jitter.prob")),
            brightness=float(_node(aug, "color_jitter.brightness")),
            contrast=float(_node(aug, "color_jitter.contrast")),
            saturation=float(_node(aug, "color_jitter.saturation")),
            hue=float(_node(aug, "color_jitter.hue")),
            grayscale_prob=float(_node(aug, "grayscale.prob")),
            blur_prob=float(_node(aug, "gaussian_blur.prob")),
            solarization_prob=float(_node(aug, "solarization.prob")),
            equalization_prob=float(_node(aug, "equalization.prob")),
            flip_prob=float(_node(aug, "horizontal_flip.prob")),
            mean=tuple(float(m) for m in mean),
            std=tuple(float(s) for s in std),
        )


def unsupported_reason(recipe: Recipe, image_size: int) -> str | None:
    """Why the batched path would not match solo-learn for ``recipe`` on images of side
    ``image_size`` (equalization; downscaling crops, which PIL antialiases), or None."""
    if recipe.equalization_prob > 0:
        return "equalization.prob > 0 (equalization is only in the per-image path)"
    if recipe.crop_size < image_size:
        return (
            f"crop_size={recipe.crop_size} is smaller than the {image_size}px images (downscaling "
            "is only antialiased in the per-image path)"
        )
    return None


def _blur_kernel_size(crop_size: int) -> int:
    """Odd kernel covering +-3 sigma of the largest sigma, no wider than the crop."""
    size = 2 * math.ceil(3 * BLUR_SIGMA[1]) + 1
    limit = crop_size if crop_size % 2 else crop_size - 1
    return max(3, min(size, limit))


class BatchAugmentation(nn.Module):
    """One solo-learn augmentation pipeline on a ``(B, C, H, W)`` uint8 batch (``C`` 1 or 3):
    returns ``(B, 3, crop_size, crop_size)`` float32 views, normalised, on the input's device,
    every image with its own random draws."""

    def __init__(self, recipe: Recipe) -> None:
        super().__init__()
        import kornia.augmentation as K  # importing kornia changes the warning filters

        if recipe.equalization_prob > 0:
            raise ValueError(
                "augmentations: equalization.prob > 0 is not supported by data.augment_on=batch; "
                "use data.augment_on=per_image"
            )
        self.recipe = recipe
        size = (recipe.crop_size, recipe.crop_size)
        # kornia's modules below draw per-image parameters (same_on_batch=False, the default);
        # the crop and jitter samplers are used for their parameters only (see module docstring).
        self.crop = K.RandomResizedCrop(size, scale=recipe.crop_scale, ratio=CROP_RATIO)
        self.jitter = K.ColorJitter(
            recipe.brightness, recipe.contrast, recipe.saturation, recipe.hue, p=recipe.jitter_prob
        )
        self.grayscale = K.RandomGrayscale(p=recipe.grayscale_prob)
        self.blur = K.RandomGaussianBlur(
            _blur_kernel_size(recipe.crop_size),
            BLUR_SIGMA,
            border_type="replicate",
            p=recipe.blur_prob,
        )
        self.solarize = K.RandomSolarize(
            thresholds=(SOLARIZE_THRESHOLD, SOLARIZE_THRESHOLD),
            additions=(0.0, 0.0),
            p=recipe.solarization_prob,
        )
        self.flip = K.RandomHorizontalFlip(p=recipe.flip_prob)

    def extra_repr(self) -> str:
        return repr(self.recipe)

    def crop_boxes(self, batch: int, height: int, width: int) -> torch.Tensor:
        """``(B, 4)`` crop boxes ``x0, y0, w, h``, one per image (whole image without ``rrc``)."""
        if not self.recipe.rrc:
            return torch.tensor([[0.0, 0.0, width, height]]).expand(batch, 4)
        src = self.crop.forward_parameters((batch, 1, height, width))["src"]
        x0, y0 = src[:, 0, 0], src[:, 0, 1]
        return torch.stack([x0, y0, src[:, 1, 0] - x0 + 1, src[:, 3, 1] - y0 + 1], dim=1)

    def resized_crop(self, x: torch.Tensor, boxes: torch.Tensor) -> torch.Tensor:
        """Bicubic resampling of each image's box onto the ``crop_size`` grid, box edges onto
        output edges (PIL's convention), image borders replicated."""
        b, c, h, w = x.shape
        boxes = boxes.to(device=x.device, dtype=x.dtype)
        x0, y0, bw, bh = boxes.unbind(1)
        theta = torch.zeros(b, 2, 3, device=x.device, dtype=x.dtype)
        theta[:, 0, 0] = bw / w
        theta[:, 0, 2] = (2 * x0 + bw) / w - 1
        theta[:, 1, 1] = bh / h
        theta[:, 1, 2] = (2 * y0 + bh) / h - 1
        size = self.recipe.crop_size
        grid = F.affine_grid(theta, [b, c, size, size], align_corners=False)
        out = F.grid_sample(x, grid, mode="bicubic", padding_mode="border", align_corners=False)
        return out.clamp_(0.0, 1.0)

    def color_jitter(self, x: torch.Tensor) -> torch.Tensor:
        """torchvision's ``RandomApply([ColorJitter])`` per image: applied with ``jitter_prob``,
        the four adjustments in an order drawn for each image."""
        from kornia.enhance import (  # imported where used: see __init__
            adjust_brightness_accumulative,
            adjust_contrast_with_mean_subtraction,
            adjust_hue,
            adjust_saturation_with_gray_subtraction,
        )

        r = self.recipe
        if r.jitter_prob <= 0:
            return x
        b, c = x.shape[:2]
        params = self.jitter.forward_parameters(tuple(x.shape))
        selected = params["batch_prob"].to(x.device).bool()
        steps = [  # (amount, function, factor); gray images skip saturation and hue (no-ops)
            (r.brightness, adjust_brightness_accumulative, params["brightness_factor"]),
            (r.contrast, adjust_contrast_with_mean_subtraction, params["contrast_factor"]),
            (
                r.saturation if c == 3 else 0.0,
                adjust_saturation_with_gray_subtraction,
                params["saturation_factor"],
            ),
            (r.hue if c == 3 else 0.0, adjust_hue, params["hue_factor"] * (2 * math.pi)),
        ]
        order = torch.rand(b, len(steps), device=x.device).argsort(dim=1)
        x = x.clone()
        for position in range(len(steps)):
            for step, (amount, fn, factor) in enumerate(steps):
                if amount <= 0:
                    continue
                idx = torch.nonzero(selected & (order[:, position] == step)).squeeze(1)
                if idx.numel():
                    factor = factor.to(device=x.device, dtype=x.dtype)[idx]
                    x[idx] = fn(x[idx], factor).clamp_(0.0, 1.0)
        return x

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        if images.dtype != torch.uint8 or images.ndim != 4 or images.shape[1] not in (1, 3):
            raise ValueError(
                "BatchAugmentation expects uint8 images of shape (B, 1 or 3, H, W), got "
                f"{images.dtype} {tuple(images.shape)}"
            )
        r = self.recipe
        b, c, h, w = images.shape
        x = images.float().div_(255.0)
        x = self.resized_crop(x, self.crop_boxes(b, h, w))
        x = self.color_jitter(x)
        if c == 3 and r.grayscale_prob > 0:
            x = self.grayscale(x)
        if r.blur_prob > 0:
            x = self.blur(x)
        if r.solarization_prob > 0:
            x = self.solarize(x)
        if r.flip_prob > 0:
            x = self.flip(x)
        mean = torch.tensor(r.mean, device=x.device, dtype=x.dtype).view(1, -1, 1, 1)
        std = torch.tensor(r.std, device=x.device, dtype=x.dtype).view(1, -1, 1, 1)
        return ((x.expand(-1, 3, -1, -1) if c == 1 else x) - mean) / std


class MultiViewAugmentation(nn.Module):
    """All of a config's pipelines: ``num_crops`` views from each, in solo-learn's order."""

    def __init__(self, recipes: Sequence[Recipe]) -> None:
        super().__init__()
        if not recipes:
            raise ValueError("augmentations: at least one pipeline is needed")
        self.pipelines = nn.ModuleList(BatchAugmentation(r) for r in recipes)

    def forward(self, images: torch.Tensor) -> list[torch.Tensor]:
        views: list[torch.Tensor] = []
        for pipeline in self.pipelines:
            n = pipeline.recipe.num_crops
            out = pipeline(images.repeat(n, 1, 1, 1) if n > 1 else images)
            views.extend(out.chunk(n) if n > 1 else [out])
        return views
