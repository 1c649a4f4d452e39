"""kNN evaluation of a pretrained checkpoint with solo-learn's ``WeightedKNNClassifier``.

    python main_knn.py CHECKPOINT [--dataset fashion-mnist] [--k 10 20] [--temperature 0.07]
        [--feature backbone|projection] [--distance cosine|euclidean]

The data defaults to the dataset the checkpoint was trained on (its ``args.json``). Prints one
line per setting and writes them as JSON with ``--output``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

from solo_bayesncl.checkpoints import LoadedCheckpoint
from solo_bayesncl.registration import require_solo_learn
from solo_bayesncl.representations import extract_representations

__all__ = ["knn_eval", "main"]

FEATURES = {"backbone": "backbone", "projection": "representation"}
"""``--feature`` choices and the feature :func:`extract_representations` reads for each."""


def _features(model, loader, feature: str) -> tuple[torch.Tensor, torch.Tensor]:
    batches = list(extract_representations(model, loader, feature=FEATURES[feature]))
    return torch.cat([b.features for b in batches]), torch.cat([b.labels for b in batches])


def _require_finite(checkpoint: Path, feature: str, splits: dict[str, torch.Tensor]) -> None:
    """A kNN vote over NaN distances reads like chance, so broken features are refused."""
    from solo_bayesncl.metrics import non_finite_rows

    bad = {name: non_finite_rows(x) for name, x in splits.items()}
    if any(bad.values()):
        counts = ", ".join(f"{bad[n]} of {len(x)} {n}" for n, x in splits.items() if bad[n])
        raise ValueError(
            f"{checkpoint}: the model gives NaN or Inf {feature} features for {counts} images "
            "(broken weights, e.g. a diverged run)"
        )


def knn_eval(
    checkpoint: str | Path | LoadedCheckpoint,
    ks: Sequence[int] = (20,),
    temperature: float = 0.07,
    feature: str = "backbone",
    distance: str = "cosine",
    dataset: str | None = None,
    batch_size: int = 256,
    num_workers: int = 2,
    device: str | None = None,
) -> dict[str, float]:
    """Top-1/top-5 kNN accuracy of the checkpoint's features on its validation set.

    ``checkpoint`` is a path or what :func:`solo_bayesncl.checkpoints.load_checkpoint` returned.
    """
    require_solo_learn("main_knn.py")
    from solo.utils.knn import WeightedKNNClassifier
    from torch.utils.data import DataLoader

    from solo_bayesncl.checkpoints import load_checkpoint, load_method
    from solo_bayesncl.data.datasets import (
        build_labelled_train_dataset,
        build_val_dataset,
        resolve_dataset_cfg,
        validation_transform,
    )
    from solo_bayesncl.methods.config_checks import require_int, require_range

    ks = [require_int("k", k, low=1) for k in ks]
    require_range("temperature", temperature, low=0.0, high=float("inf"))
    require_int("batch_size", batch_size, low=1)
    require_int("num_workers", num_workers, low=0)
    if feature not in FEATURES:
        raise ValueError(
            f"feature={feature!r} is not supported; allowed values: {', '.join(FEATURES)}"
        )
    if distance not in ("cosine", "euclidean"):
        raise ValueError(
            f"distance={distance!r} is not supported; allowed values: cosine, euclidean"
        )
    loaded = checkpoint if isinstance(checkpoint, LoadedCheckpoint) else load_checkpoint(checkpoint)
    cfg = loaded.cfg.copy()
    if dataset is not None:
        cfg.data.dataset = dataset
        cfg.data.pop("offline_dataset", None)
        cfg = resolve_dataset_cfg(cfg)
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    model = load_method(loaded, device=device)
    transform = validation_transform(cfg)
    splits = (build_labelled_train_dataset(cfg, transform), build_val_dataset(cfg, transform))
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
        DataLoader(d, batch_size=batch_size, shuffle=False, num_workers=num_workers)
        for d in splits
    ]
    train_x, train_y = _features(model, loaders[0], feature)
    val_x, val_y = _features(model, loaders[1], feature)
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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint")
    parser.add_argument("--dataset", default=None, help="defaults to the checkpoint's dataset")
    parser.add_argument("--k", type=int, nargs="+", default=[20])
    parser.add_argument("--temperature", type=float, default=0.07)
    parser.add_argument("--feature", choices=tuple(FEATURES), default="backbone")
    parser.add_argument("--distance", choices=("cosine", "euclidean"), default="cosine")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--output", type=Path, default=None, help="write the results as JSON")
    argv = sys.argv[1:] if argv is None else list(argv)
    if not {"-h", "--help"} & set(argv):
        require_solo_learn("solo-bayesncl-knn")
    args = parser.parse_args(argv)
    from solo_bayesncl.cli.console import input_errors
    from solo_bayesncl.registration import quiet_third_party_warnings

    quiet_third_party_warnings()
    # bad options, unreadable checkpoints and NaN features: one line and exit status 2
    with input_errors("solo-bayesncl-knn"):
        if args.output is not None:  # before the kNN work, not after it
            from solo_bayesncl.files import require_writable

            if args.output.is_dir():
                raise ValueError(f"--output {args.output} is a folder; give a file name")
            if not args.output.parent.is_dir():
                raise FileNotFoundError(
                    f"--output {args.output}: the folder {args.output.parent} does not exist"
                )
            require_writable(args.output.parent, what="--output")
        results = knn_eval(
            args.checkpoint,
            args.k,
            args.temperature,
            args.feature,
            args.distance,
            args.dataset,
            args.batch_size,
            args.num_workers,
        )
    for key, value in results.items():
        print(f"{key}: {value:.2f}")
    if args.output is not None:
        args.output.write_text(json.dumps(results, indent=2) + "\n")
    return 0
