"""A linear probe trained to convergence on frozen features, the measure the study reads where
solo-learn's few-epoch offline probe reads the optimiser as much as the representation: a
multinomial logistic regression (scikit-learn, L-BFGS, L2 ``C = 1``, ``tol`` 1e-4) on
standardised features of the un-augmented training images, read on the validation images;
:class:`ProbeResult` says whether it converged."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler

__all__ = ["MAX_ITER", "ProbeResult", "logistic_probe"]

MAX_ITER = 5000
"""L-BFGS iterations allowed; fits on 512-d features of 5,000 images end in a few hundred."""


@dataclass(frozen=True)
class ProbeResult:
    """``top1``: validation accuracy (%); ``converged``: L-BFGS met its tolerance before
    ``MAX_ITER``; ``iterations``: the iterations it took."""

    top1: float
    converged: bool
    iterations: int


def logistic_probe(
    train_x: np.ndarray, train_y: np.ndarray, val_x: np.ndarray, val_y: np.ndarray
) -> ProbeResult:
    """Fits the probe on ``(train_x, train_y)`` and scores it on ``(val_x, val_y)``."""
    train_x = np.asarray(train_x, dtype=np.float64)
    val_x = np.asarray(val_x, dtype=np.float64)
    if len(train_x) == 0 or len(val_x) == 0:
        raise ValueError("the linear probe needs training and validation features (got none)")
    if len(np.unique(train_y)) < 2:
        raise ValueError("the linear probe needs at least two classes in the training labels")
    scaler = StandardScaler().fit(train_x)
    clf = LogisticRegression(max_iter=MAX_ITER)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # reported as ``converged``
        clf.fit(scaler.transform(train_x), train_y)
    iterations = int(np.max(clf.n_iter_))
    top1 = 100.0 * float((clf.predict(scaler.transform(val_x)) == np.asarray(val_y)).mean())
    return ProbeResult(top1=top1, converged=iterations < MAX_ITER, iterations=iterations)
