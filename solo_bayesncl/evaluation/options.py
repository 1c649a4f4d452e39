"""The evaluation report's options (:class:`ReportOptions`), checked once when built, so a bad
value is refused before anything is read, in the words the command uses."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from solo_bayesncl.core.validation import require_choice, require_int
from solo_bayesncl.metrics import TOP_IMAGES
from solo_bayesncl.metrics.accumulator import SHUFFLE_PERMUTATIONS, check_shuffle_permutations
from solo_bayesncl.metrics.retrieval import check_retrieval_max_samples

__all__ = ["PASS_OPTIONS", "PROTOCOLS", "ReportError", "ReportOptions"]

PROTOCOLS: tuple[str, ...] = ("standard", "paper", "ncl-paper")
"""``standard``: this project's shared metrics, eval-mode BatchNorm. ``paper``: the standard
report plus the official BayesNCL evaluation's figures (``metrics_paper``). ``ncl-paper``: the
standard report plus the NCL repository's evaluation figures (``metrics_ncl_paper``)."""
PASS_OPTIONS: tuple[str, ...] = (
    "dataset",
    "batch_size",
    "max_images",
    "device",
    "thumbnail_size",
    "shuffle_permutations",
    "retrieval_max_samples",
)
"""The options that decide what the pass over the images gives."""


class ReportError(ValueError):
    """The report cannot be written (folder not empty, no labelled validation data, bad option)."""


@dataclass(frozen=True)
class ReportOptions:
    """Every option of the evaluation report (the command's flags of the same names); an option out
    of range raises :class:`ReportError`. ``dataset``: a name or an image folder (None: the
    checkpoint's); ``max_images``: a seeded random subset; ``device``: None is cuda when available;
    ``images_per_dim``: top images per dimension, shown and the purity taken over (default: the
    dashboard's count); ``protocol``: one of :data:`PROTOCOLS`."""

    dataset: str | Path | None = None
    batch_size: int = 256
    max_images: int | None = None
    device: str | None = None
    num_workers: int = 2
    thumbnail_size: int = 64
    shuffle_permutations: int = SHUFFLE_PERMUTATIONS
    retrieval_max_samples: int | None = None
    top_dims: int = 16
    images_per_dim: int = TOP_IMAGES
    protocol: str = "standard"

    def __post_init__(self) -> None:
        ints = [
            ("--batch-size", self.batch_size, 1),
            ("--top-dims", self.top_dims, 1),
            ("--images-per-dim", self.images_per_dim, 1),
            ("--num-workers", self.num_workers, 0),
            ("thumbnail_size", self.thumbnail_size, 1),
        ]
        if self.max_images is not None:
            ints.append(("--max-images", self.max_images, 1))
        try:
            for name, value, low in ints:
                require_int(name, value, low=low)
            check_shuffle_permutations("--shuffle-permutations", self.shuffle_permutations)
            check_retrieval_max_samples("--retrieval-max-samples", self.retrieval_max_samples)
            require_choice("--protocol", self.protocol, PROTOCOLS)
            if self.device is not None:
                require_choice("--device", self.device, ("cpu", "cuda"))
        except ValueError as err:
            raise ReportError(str(err)) from None

    def pass_settings(self) -> dict[str, Any]:
        """The values of :data:`PASS_OPTIONS` (a dataset as its string)."""
        settings = {name: getattr(self, name) for name in PASS_OPTIONS}
        settings["dataset"] = None if self.dataset is None else str(self.dataset)
        return settings
