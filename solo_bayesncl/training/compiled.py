"""The backbone's training forward compiled with ``torch.compile`` (``performance.compile``).

Off by default. Inductor fuses the elementwise work between ResNet-18's convolutions (BatchNorm,
ReLU, the residual additions, forward and backward) that eager PyTorch runs as separate passes
over memory. On two idle AMD EPYC (Zen 4) cores at the ``cpu`` preset's 2 x 256 views the eager
step already reaches about 0.7 of the nominal fp32 limit and the compiled one measured level with
it (paired ratio 0.98-1.02 at 2 x 128 and 2 x 256 views), after a first step of about 30 s while
it compiles (a few seconds once inductor's on-disk cache holds the graph); docs/training.md,
"Compiled training step", has the figures and the command. ``performance.compile=True`` is for
machines where it wins (measure with ``microbenchmarks/bench_train_step.py --compare-compile``).

Only the forward of the backbone in training mode with gradients on is compiled: validation,
feature extraction and the momentum backbone of MoCo run the eager forward, so evaluation numbers
come from the same code as before, and there is one graph to compile, not one per mode and batch
size. The compiled forward is set on the module instance (``backbone.forward``): the module, its
parameters and its ``state_dict`` keys stay what they were, so checkpoints are unchanged.
Compiled and eager training agree to float tolerance, not bit for bit (inductor orders some
reductions differently).
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
    """Makes ``backbone``'s forward in training mode with gradients on a compiled one, in place.

    In eval mode or under ``torch.no_grad`` the eager forward runs, so features for validation
    and evaluation are computed as without compiling. Returns ``backbone``; applying it twice is
    a no-op.
    """
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
