"""The heads the plugin's methods put on the backbone features ``h``: the projector and
BayesNCL's gating head (arXiv 2605.28441, section 3: "a gating head ``g`` maps the detached
backbone features to one logit per feature, ``a = g(sg(h))``").

Both are ``Linear -> ReLU -> Linear``, SimCLR's projector shape, and keep the official codes'
state names (``projector.0.weight``, ``gating_head.2.bias``...), so their checkpoints load.
Plain PyTorch: usable without solo-learn::

    gating_head = GatingHead(512, 2048, 256)
    logits = gating_head(feats)          # no gradient reaches feats
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["GatingHead", "projector"]


def projector(in_dim: int, hidden_dim: int, out_dim: int) -> nn.Sequential:
    """``Linear -> ReLU -> Linear``: the projector ``z = f(h)`` of SimCLR, NCL and BayesNCL."""
    return nn.Sequential(
        nn.Linear(in_dim, hidden_dim),
        nn.ReLU(),
        nn.Linear(hidden_dim, out_dim),
    )


class GatingHead(nn.Sequential):
    """BayesNCL's gating head ``a = g(sg(h))``: a projector-shaped MLP on the *detached* backbone
    features, so that the gate (and its KL) never pushes on the backbone.

    Args:
        in_dim: width of the backbone features ``h``.
        hidden_dim: hidden width.
        out_dim: number of gates, one per feature of the representation (``k``).
    """

    def __init__(self, in_dim: int, hidden_dim: int, out_dim: int) -> None:
        super().__init__(*projector(in_dim, hidden_dim, out_dim))

    def forward(self, feats: torch.Tensor) -> torch.Tensor:
        return super().forward(feats.detach())
