"""Non-negativity maps ``phi`` applied to the projector output (docs/method.md, "Non-negativity").

NCL (Wang et al., ICLR 2024, arXiv 2403.12459) makes contrastive features non-negative with
``z+ = phi(z)``; BayesNCL (arXiv 2605.28441) keeps the same maps. ``rep_relu`` is the NCL code's
reparameterised ReLU: ReLU's value forward, GELU's gradient backward, so dead units still train."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

__all__ = [
    "NON_NEGATIVITY_MAPS",
    "non_negative",
    "rep_relu",
    "resolve_non_neg",
]


class _RepReLU(torch.autograd.Function):
    """``relu(z)`` forward, ``gelu'(z)`` backward: one pass each way."""

    @staticmethod
    def forward(ctx, z: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(z)
        return F.relu(z)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        (z,) = ctx.saved_tensors
        return torch.ops.aten.gelu_backward(grad, z)


def rep_relu(z: torch.Tensor) -> torch.Tensor:
    """ReLU in the forward pass with GELU's gradient in the backward pass (NCL, arXiv 2403.12459,
    official code's ``rep_relu``: ``gelu(z) - sg(gelu(z)) + sg(relu(z))``), as one autograd
    function, so neither pass evaluates GELU's value."""
    return _RepReLU.apply(z)


def _identity(z: torch.Tensor) -> torch.Tensor:
    return z


NON_NEGATIVITY_MAPS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": F.relu,
    "rep_relu": rep_relu,
    "gelu": F.gelu,
    "softplus": F.softplus,
    "sigmoid": torch.sigmoid,
    "exp": torch.exp,
    "leaky_relu": F.leaky_relu,
    "none": _identity,
}
"""Every supported ``non_neg`` value. ``gelu`` and ``leaky_relu`` are not strictly non-negative;
they are offered, as in the NCL code, for ablations."""

# Spellings of the official NCL/BayesNCL configs that mean the same map.
_ALIASES: dict[str, str] = {"leakyrelu": "leaky_relu", "null": "none", "identity": "none"}


def resolve_non_neg(name: str | None, key: str = "non_neg") -> str:
    """The canonical name of a non-negativity map, from any letter case or the official codes'
    spellings (``None``/``null``, ``leakyrelu``); ``ValueError`` naming ``key`` otherwise."""
    if name is None:
        return "none"
    canonical = _ALIASES.get(str(name).lower(), str(name).lower())
    if canonical not in NON_NEGATIVITY_MAPS:
        allowed = ", ".join(sorted(NON_NEGATIVITY_MAPS))
        raise ValueError(f"{key}={name!r} is not supported; allowed values: {allowed}")
    return canonical


def non_negative(z: torch.Tensor, kind: str = "relu") -> torch.Tensor:
    """Applies the non-negativity map ``kind`` (see :data:`NON_NEGATIVITY_MAPS`) to ``z``."""
    return NON_NEGATIVITY_MAPS[resolve_non_neg(kind)](z)
