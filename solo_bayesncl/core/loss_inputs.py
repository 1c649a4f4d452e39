"""The checks of a contrastive loss's inputs (:func:`solo_bayesncl.core.losses.info_nce_loss` and
the loss modules): temperature and shapes, then finite, L2-normalised rows that each have a
positive. Each raises a ValueError that names the input, what is wrong and what is allowed."""

from __future__ import annotations

import torch

from solo_bayesncl.core.hyperparameters import checked

__all__ = ["NORM_TOLERANCE", "check_contrast", "check_unit_rows", "norm_tolerance"]


def check_contrast(v: torch.Tensor, indexes: torch.Tensor, temperature: float) -> float:
    """Raises as :func:`info_nce_loss` says for the temperature and the shapes; returns ``T``."""
    temperature = checked("temperature", temperature)
    if v.ndim != 2:
        raise ValueError(f"v must be 2-D (rows x dims), got shape {tuple(v.shape)}")
    if v.shape[0] == 0:
        raise ValueError("v has no rows: the loss is a mean over rows, undefined for none")
    if indexes.shape != (v.shape[0],):
        raise ValueError(
            f"indexes must have shape ({v.shape[0]},), one identifier per row of v "
            f"{tuple(v.shape)}; got {tuple(indexes.shape)}"
        )
    return temperature


#: How far a float32 (or float64) row's L2 norm may exceed 1 and still count as normalised.
NORM_TOLERANCE = 1e-3


def norm_tolerance(dtype: torch.dtype) -> float:
    """How far the L2 norm of a ``dtype`` row may exceed 1 and count as normalised:
    :data:`NORM_TOLERANCE`, or twice the dtype's epsilon when larger (bf16 ``2 * 2^-7``)."""
    if not dtype.is_floating_point:
        return NORM_TOLERANCE
    return max(NORM_TOLERANCE, 2.0 * torch.finfo(dtype).eps)


def check_unit_rows(
    v: torch.Tensor, different: torch.Tensor, tolerance: float = NORM_TOLERANCE
) -> None:
    """Raises when rows of ``v`` are not finite, not L2-normalised (:func:`norm_tolerance`) or have
    no positive (one device read). ``different[i, j]``: rows ``i`` and ``j`` are other images."""
    norms = torch.linalg.vector_norm(v, dim=1)
    non_finite, unnormalised, lonely = torch.stack(
        [
            (~torch.isfinite(v)).any(dim=1).sum(),
            (norms > 1 + tolerance).sum(),
            ((~different).sum(dim=1) < 2).sum(),
        ]
    ).tolist()
    n = v.shape[0]
    if non_finite:
        raise ValueError(f"v: {non_finite} of {n} rows hold NaN or Inf values")
    if unnormalised:
        raise ValueError(
            f"v: {unnormalised} of {n} rows have an L2 norm above 1; the loss reads L2-normalised "
            "rows (zero rows allowed): normalise them first, e.g. with normalize_rows (largest "
            f"norm {float(norms.max()):.4g}, tolerance {tolerance:g})"
        )
    if lonely:
        raise ValueError(
            f"indexes: {lonely} of {n} rows have no positive (no other row with the same "
            "identifier); every image needs two or more views"
        )
