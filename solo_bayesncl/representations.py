"""The representation the interpretability metrics read, for every method (DESIGN section 2).

- ``bayesncl``: ``v = normalize(normalize(phi(z)) * m)`` with the hard gate, or the soft gate
  ``normalize(u * alpha)`` on request (it zeroes nothing, so on threshold-based metrics such as
  sparsity and semantic consistency it equals no gate at all);
- ``ncl``: ``normalize(phi(z))``;
- SimCLR, MoCo v2+ and any other method with a projector: the normalised projection.
The linear probe and kNN read the backbone features instead.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["GATES", "RepresentationBatch", "extract_representations", "representation_from_output"]

GATES: tuple[str, ...] = ("hard", "soft")


def representation_from_output(
    model: nn.Module, out: dict[str, Any], gate: str = "hard"
) -> torch.Tensor:
    """The interpretable representation of a forward output ``out`` of ``model``."""
    if gate not in GATES:
        raise ValueError(f"gate={gate!r} is not supported; allowed values: {', '.join(GATES)}")
    if hasattr(model, "representation"):
        return model.representation(out, gate=gate)
    if "z" in out:
        return F.normalize(out["z"].float(), dim=-1)
    raise ValueError(
        f"{type(model).__name__} has no projector output 'z'; the interpretability metrics read "
        "the projection of SimCLR, MoCo v2+, NCL or BayesNCL"
    )


@dataclass
class RepresentationBatch:
    """One batch of extracted features.

    Attributes:
        features: ``(n, k)`` float32 representation on CPU.
        labels: ``(n,)`` int64.
        gate_open: ``(n, k)`` bool, the hard gate of BayesNCL; None for other methods.
        images: the input batch on CPU when requested, else None.
    """

    features: torch.Tensor
    labels: torch.Tensor
    gate_open: torch.Tensor | None = None
    images: torch.Tensor | None = None


@torch.no_grad()
def extract_representations(
    model: nn.Module,
    loader,
    gate: str = "hard",
    device: torch.device | str | None = None,
    keep_images: bool = False,
    progress: bool = False,
) -> Iterator[RepresentationBatch]:
    """Yields the representation of every ``(images, labels)`` batch of ``loader``.

    The model is put in eval mode for the pass and restored afterwards.
    """
    device = torch.device(device) if device is not None else next(model.parameters()).device
    was_training = model.training
    model.eval()
    batches = loader
    if progress:
        from tqdm.auto import tqdm

        batches = tqdm(loader, desc="extracting features", unit="batch")
    try:
        for images, labels in batches:
            out = model(images.to(device, non_blocking=True))
            features = representation_from_output(model, out, gate=gate)
            gate_open = None
            if "gate_logits" in out and hasattr(model, "gate_output"):
                gate_open = (model.gate_output(out["gate_logits"], "hard").mask > 0.5).cpu()
            yield RepresentationBatch(
                features=features.float().cpu(),
                labels=labels.long().cpu(),
                gate_open=gate_open,
                images=images.cpu() if keep_images else None,
            )
    finally:
        model.train(was_training)
