"""The checks and settings of ``data.format=dali``, made before any model is built.

A file that is not an image stops DALI mid-epoch, and an empty folder fails inside solo-learn
with an unpacking error, so both are checked here first, naming the folder or the file.
``dali.device`` (:data:`DALI_DEVICES`) is explained in docs/training.md.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from solo_bayesncl.data.names import DatasetSpec

__all__ = [
    "DALI_DEVICES",
    "INSTALL_DALI",
    "DaliDataError",
    "check_dali_folder",
    "check_linear_dali",
    "dali_available",
]

INSTALL_DALI = 'pip install "solo-bayesncl[dali]"'
LINEAR_DALI_CROP = 224
IMAGENET_MEAN_STD = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
"""solo-learn's DALI classification pipeline trains on 224 px crops with ImageNet normalisation."""
DALI_DEVICES: dict[str, str] = {"cpu": "cpu", "gpu": "gpu", "mixed": "gpu"}
"""Accepted ``dali.device`` values and the value solo-learn's data modules receive."""

# Leading bytes of the formats DALI's image decoder reads (JPEG, PNG, BMP, TIFF, JPEG 2000,
# WebP, PNM); a file that starts otherwise would stop the decoder mid-epoch.
_SIGNATURES: tuple[bytes, ...] = (
    b"\xff\xd8\xff",
    b"\x89PNG\r\n\x1a\n",
    b"BM",
    b"II*\x00",
    b"MM\x00*",
    b"\x00\x00\x00\x0cjP  \r\n\x87\n",
    b"\xffO\xffQ",
    *(f"P{n}".encode() for n in range(1, 7)),
)


class DaliDataError(ValueError):
    """``data.format=dali`` cannot run with this config or this folder."""


def dali_available() -> bool:
    """Whether NVIDIA DALI (any CUDA build of ``nvidia-dali``) can be imported."""
    try:
        return importlib.util.find_spec("nvidia.dali") is not None
    except (ImportError, ValueError):
        return False


def dali_file_list(folder: Path, no_labels: bool = False) -> list[Path]:
    """The entries solo-learn's DALI pipelines hand to the reader, in their order: every entry of
    every sub-folder (sorted), or of ``folder`` itself when ``no_labels``."""
    if no_labels:
        return [folder / name for name in sorted(os.listdir(folder))]
    classes = sorted(entry.name for entry in os.scandir(folder) if entry.is_dir())
    return [folder / c / name for c in classes for name in sorted(os.listdir(folder / c))]


def _not_an_image(path: Path) -> str | None:
    """Why DALI could not read ``path`` as an image, or None when its header is one."""
    if not path.is_file():
        return "not a file"
    try:
        with open(path, "rb") as f:
            head = f.read(16)
    except OSError as err:
        return f"unreadable ({err.strerror or err})"
    if head.startswith(b"RIFF") and head[8:12] == b"WEBP":
        return None
    if any(head.startswith(sig) for sig in _SIGNATURES):
        return None
    return "not an image DALI decodes (JPEG, PNG, BMP, TIFF, JPEG 2000, WebP, PNM)"


def check_dali_folder(
    folder: str | Path, key: str, no_labels: bool = False, batch_size: int | None = None
) -> int:
    """Checks an image folder as solo-learn's DALI reader will read it (readable image files; with
    ``batch_size``, one full batch, as DALI drops a partial one); returns its image count."""
    path = Path(str(folder))
    if not path.is_dir():
        raise DaliDataError(f"{key}={str(folder)!r} is not a folder")
    files = dali_file_list(path, no_labels)
    if not files:
        layout = "images" if no_labels else "class sub-folders of images"
        raise DaliDataError(f"{key}={str(folder)!r} has no images (DALI reads {layout})")
    bad = [(f, why) for f in files if (why := _not_an_image(f)) is not None]
    if bad:
        first, why = bad[0]
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        raise DaliDataError(
            f"{key}={str(folder)!r}: {first.relative_to(path)} is {why}{more}; "
            "DALI reads every entry of the class folders, so move other files out"
        )
    if batch_size is not None and len(files) < batch_size:
        raise DaliDataError(
            f"{key}={str(folder)!r} has {len(files)} images, fewer than one batch "
            f"(optimizer.batch_size={batch_size}); DALI drops incomplete batches"
        )
    return len(files)


def check_linear_dali(data: DatasetSpec) -> None:
    """Linear evaluation through solo-learn's DALI pipeline trains on 224 px crops with ImageNet's
    mean and std whatever the config says: the config must say the same, for validation."""
    crop = data.crop_size
    if crop != LINEAR_DALI_CROP:
        raise DaliDataError(
            f"data.augmentations.crop_size={crop}: linear evaluation with data.format=dali trains "
            f"on solo-learn's {LINEAR_DALI_CROP} px crops; set it to {LINEAR_DALI_CROP} or use "
            "data.format=image_folder"
        )
    for key, value, expected in zip(
        ("mean", "std"), (data.mean, data.std), IMAGENET_MEAN_STD, strict=True
    ):
        if value is not None and any(
            abs(v - e) > 1e-3 for v, e in zip(value, expected, strict=True)
        ):
            raise DaliDataError(
                f"data.augmentations.{key}={list(value)}: linear evaluation with data.format=dali "
                f"normalises with ImageNet's {key} {list(expected)}; remove the key or use "
                "data.format=image_folder"
            )
    check_dali_folder(str(data.val_path), "data.val_path")
