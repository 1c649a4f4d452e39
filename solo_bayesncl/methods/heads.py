"""The projector ``z = g(h)``, SimCLR's ``Linear -> ReLU -> Linear`` (NCL, arXiv 2403.12459;
BayesNCL, arXiv 2605.28441), under the official state names (``projector.0.weight``...), so
their checkpoints load; plain PyTorch."""

from __future__ import annotations

from torch import nn

__all__ = ["projector"]


def projector(in_dim: int, hidden_dim: int, out_dim: int) -> nn.Sequential:
    """``Linear -> ReLU -> Linear``: the projector ``z = f(h)`` of SimCLR, NCL and BayesNCL."""
    return nn.Sequential(
        nn.Linear(in_dim, hidden_dim),
        nn.ReLU(),
        nn.Linear(hidden_dim, out_dim),
    )
