"""The backbone's training forward compiled with ``torch.compile`` (``performance.compile``).

Off by default: it did not win where measured (docs/training.md, "Compiled training step").
Only the training forward with gradients is compiled (evaluation runs eager), set on the module
instance, so ``state_dict`` keys and checkpoints are unchanged; results agree to float tolerance.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

__all__ = ["compile_training_forward", "is_compiled"]

_MARK = "_solo_bayesncl_eager_forward"


def is_compiled(backbone: nn.Module) -> bool:
    """Whether :func:`compile_training_forward` was applied to ``backbone``."""
    return _MARK in vars(backbone)


def compile_training_forward(backbone: nn.Module) -> nn.Module:
    """Makes ``backbone``'s forward in training mode with gradients on a compiled one, in place
    (eval mode or ``torch.no_grad`` run the eager one); returns ``backbone``. Idempotent."""
    if is_compiled(backbone):
        return backbone
    eager: Callable[..., Any] = backbone.forward
    compiled = torch.compile(eager, dynamic=False)

    def forward(*args: Any, **kwargs: Any) -> Any:
        if backbone.training and torch.is_grad_enabled():
            return compiled(*args, **kwargs)
        return eager(*args, **kwargs)

    setattr(backbone, _MARK, eager)
    backbone.forward = forward
    return backbone
