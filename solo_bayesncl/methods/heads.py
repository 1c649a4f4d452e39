"""The projector the plugin's methods put on the backbone features ``h``: ``z = g(h)``, SimCLR's
``Linear -> ReLU -> Linear`` (NCL, arXiv 2403.12459; BayesNCL, arXiv 2605.28441). Its state
names (``projector.0.weight``...) are the official codes', so their checkpoints load. BayesNCL's
gating head is :class:`solo_bayesncl.core.gates.GatingHead`, beside the gate it feeds.
Plain PyTorch: usable without solo-learn::

    z = projector(512, 2048, 256)(feats)
"""

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
