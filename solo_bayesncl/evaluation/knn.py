"""kNN evaluation of a pretrained checkpoint (:mod:`solo_bayesncl.cli.knn`) with solo-learn's
``WeightedKNNClassifier``, on the dataset it was trained on unless told otherwise."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
from torch.utils.data import DataLoader

from solo_bayesncl.config.runtime import pick_device
from solo_bayesncl.config.saved import switched_dataset
from solo_bayesncl.core.representations import extract_representations
from solo_bayesncl.core.validation import require_choice, require_int, require_range
from solo_bayesncl.data.datasets import (
    build_labelled_train_dataset,
    build_val_dataset,
    validation_transform,
)
from solo_bayesncl.host.availability import require_solo_learn
from solo_bayesncl.io.checkpoints import LoadedCheckpoint, load_checkpoint, load_method
from solo_bayesncl.metrics import non_finite_rows

__all__ = ["BATCH_SIZE", "DISTANCES", "FEATURES", "K", "NUM_WORKERS", "TEMPERATURE", "knn_eval"]

K = 20
"""Neighbours in the vote unless a setting says otherwise; every kNN default is written here."""
TEMPERATURE = 0.07
"""Temperature of the vote's weights ``exp(similarity / T)`` (solo-learn's)."""
BATCH_SIZE = 256
"""Images per batch of the feature passes."""
NUM_WORKERS = 2
"""Data loader processes of the feature passes."""

FEATURES = {"backbone": "backbone", "projection": "representation"}
"""``--feature`` choices and the feature :func:`extract_representations` reads for each."""
DISTANCES: tuple[str, ...] = ("cosine", "euclidean")


def _features(model, loader, feature: str) -> tuple[torch.Tensor, torch.Tensor]:
    batches = list(extract_representations(model, loader, feature=FEATURES[feature]))
    return torch.cat([b.features for b in batches]), torch.cat([b.labels for b in batches])


def _require_finite(checkpoint: Path, feature: str, splits: dict[str, torch.Tensor]) -> None:
    """A kNN vote over NaN distances reads like chance, so broken features are refused."""
    bad = {name: non_finite_rows(x) for name, x in splits.items()}
    if any(bad.values()):
        counts = ", ".join(f"{bad[n]} of {len(x)} {n}" for n, x in splits.items() if bad[n])
        raise ValueError(
            f"{checkpoint}: the model gives NaN or Inf {feature} features for {counts} images "
            "(broken weights, e.g. a diverged run)"
        )


def knn_eval(
    checkpoint: str | Path | LoadedCheckpoint,
    ks: Sequence[int] = (K,),
    temperature: float = TEMPERATURE,
    feature: str = "backbone",
    distance: str = "cosine",
    dataset: str | None = None,
    batch_size: int = BATCH_SIZE,
    num_workers: int = NUM_WORKERS,
    device: str | None = None,
    *,
    model: torch.nn.Module | None = None,
    val_features: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> dict[str, float]:
    """Top-1/top-5 kNN accuracy of the checkpoint's features on its validation set. ``model``: the
    checkpoint's, when the caller holds it; ``val_features``: the ``(features, labels)`` of a pass
    already made at :func:`validation_transform`, used instead of a pass of its own."""
    require_solo_learn("main_knn.py")
    from solo.utils.knn import WeightedKNNClassifier

    ks = [require_int("k", k, low=1) for k in ks]
    require_range("temperature", temperature, low=0.0, high=float("inf"))
    require_int("batch_size", batch_size, low=1)
    require_int("num_workers", num_workers, low=0)
    require_choice("feature", feature, FEATURES)
    require_choice("distance", distance, DISTANCES)
    loaded = checkpoint if isinstance(checkpoint, LoadedCheckpoint) else load_checkpoint(checkpoint)
    data = switched_dataset(loaded.spec, dataset).data
    if model is None:
        model = load_method(loaded, device=pick_device(device))
    transform = validation_transform(data)
    splits = (build_labelled_train_dataset(data, transform), build_val_dataset(data, transform))
    if splits[1] is None:
        raise ValueError(
            f"{loaded.path}: its config has no labelled validation data; pass --dataset"
        )
    too_large = [k for k in ks if k > len(splits[0])]
    if too_large:  # solo-learn would clip k silently, and the result's name would say otherwise
        raise ValueError(
            f"--k {too_large[0]} is larger than the {len(splits[0])} training images the vote "
            f"reads; allowed: an integer in [1, {len(splits[0])}]"
        )
    loaders = [
        DataLoader(d, batch_size=batch_size, shuffle=False, num_workers=num_workers) for d in splits
    ]
    if val_features is not None and {len(v) for v in val_features} != {len(splits[1])}:
        raise ValueError(
            f"val_features hold {len(val_features[0])} features and {len(val_features[1])} "
            f"labels; the validation set has {len(splits[1])} images"
        )
    train_x, train_y = _features(model, loaders[0], feature)
    val_x, val_y = val_features or _features(model, loaders[1], feature)
    _require_finite(loaded.path, feature, {"training": train_x, "validation": val_x})
    results: dict[str, float] = {}
    for k in ks:
        knn = WeightedKNNClassifier(k=k, T=temperature, distance_fx=distance)
        knn.update(
            train_features=train_x, train_targets=train_y, test_features=val_x, test_targets=val_y
        )
        acc1, acc5 = knn.compute()
        results[f"knn_top1_k{k}"] = float(acc1)
        results[f"knn_top5_k{k}"] = float(acc5)
    return results
