"""A demo report: real Fashion-MNIST images with synthetic features, to preview the dashboard.
Dimension ``j`` prefers class ``j mod C``: it fires on ``p_in`` of its images and ``p_out`` of
the others, with exponential values; the last ``dead_share`` never fire."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from solo_bayesncl.dashboard import write_feature_bundle
from solo_bayesncl.data.fashion_mnist import CLASS_NAMES, fashion_mnist_root, read_split
from solo_bayesncl.metrics import EPS, semantic_consistency, sparsity

FASHION_MNIST_DIR = fashion_mnist_root()
FASHION_MNIST_CLASSES = CLASS_NAMES


def load_fashion_mnist(
    root: str | Path = FASHION_MNIST_DIR, split: str = "t10k", n: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """First ``n`` images (uint8, N x 28 x 28) and labels (int64) of a Fashion-MNIST split.

    ``split`` is ``t10k`` (10,000 test images) or ``train`` (60,000).
    """
    if split not in ("t10k", "train"):
        raise ValueError(f"split must be 't10k' or 'train', got {split!r}")
    root = Path(root)
    images_path = root / f"{split}-images-idx3-ubyte.gz"
    labels_path = root / f"{split}-labels-idx1-ubyte.gz"
    for p in (images_path, labels_path):
        if not p.is_file():
            raise FileNotFoundError(
                f"{p} not found (Debian package dataset-fashion-mnist installs it)"
            )
    images, labels = read_split(images_path, labels_path)
    return images[:n], labels[:n]


def synthetic_sparse_features(
    labels: np.ndarray,
    num_classes: int,
    k: int,
    *,
    p_in: float = 0.5,
    p_out: float = 0.03,
    dead_share: float = 0.1,
    seed: int = 0,
) -> np.ndarray:
    """Non-negative (N, k) float32 features whose dimension j prefers class ``j mod C``."""
    rng = np.random.default_rng(seed)
    n = len(labels)
    preferred = np.arange(k) % num_classes
    match = labels[:, None] == preferred[None, :]
    fire = rng.random((n, k)) < np.where(match, p_in, p_out)
    values = rng.exponential(1.0, size=(n, k)) * np.where(match, 1.0, 0.4)
    feats = np.where(fire, values, 0.0).astype(np.float32)
    n_dead = int(round(dead_share * k))
    if n_dead:
        feats[:, k - n_dead :] = 0.0
    norms = np.linalg.norm(feats, axis=1, keepdims=True)
    return feats / np.maximum(norms, 1e-12)


def make_demo_report(
    out: str | Path,
    *,
    n: int = 1000,
    k: int = 64,
    method: str = "bayesncl (synthetic features)",
    gates: bool = True,
    seed: int = 0,
    root: str | Path = FASHION_MNIST_DIR,
    **feature_kwargs: float,
) -> Path:
    """Write a report folder over the first ``n`` Fashion-MNIST test images; return its path."""
    images, labels = load_fashion_mnist(root, "t10k", n)
    feats = synthetic_sparse_features(
        labels, len(FASHION_MNIST_CLASSES), k, seed=seed, **feature_kwargs
    )
    gate = None
    if gates:
        rng = np.random.default_rng(seed + 1)
        fired = (feats > EPS).mean(axis=0)
        gate = np.clip(fired + rng.uniform(0.0, 0.05, size=k) * (fired > 0), 0, 1)
    feats_t, labels_t = torch.from_numpy(feats), torch.from_numpy(labels.astype(np.int64))
    return write_feature_bundle(
        out,
        features=feats.astype(np.float16),
        labels=labels,
        class_names=list(FASHION_MNIST_CLASSES),
        thumbnails=images,
        gate_open_rate=gate,
        method=method,
        checkpoint="(synthetic demo, no checkpoint)",
        dataset=f"Fashion-MNIST test, first {len(labels)} images",
        metrics={
            "sparsity": sparsity(feats_t),
            "semantic_consistency": semantic_consistency(
                feats_t, labels_t, len(FASHION_MNIST_CLASSES)
            ),
        },
    )
