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

import os
import shutil
from collections.abc import Callable
from typing import Any

import omegaconf
import torch
from omegaconf import OmegaConf
from torch import nn

from solo_bayesncl.core.validation import ConfigError, parse_bool

__all__ = [
    "compile_training_forward",
    "cpp_compiler",
    "decide_compile",
    "is_compiled",
]

_MARK = "_solo_bayesncl_eager_forward"


def cpp_compiler() -> str | None:
    """The C++ compiler inductor would use on the CPU (``$CXX``, else ``g++``, ``c++`` or
    ``clang++`` on the path), or None."""
    for name in (os.environ.get("CXX"), "g++", "c++", "clang++"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def decide_compile(cfg: omegaconf.DictConfig) -> bool:
    """Whether the pretraining of ``cfg`` compiles the backbone's training forward:
    ``performance.compile`` (left out: False). True on the CPU without a C++ compiler, which
    inductor needs there, raises :class:`ConfigError`, before training starts."""
    value = OmegaConf.select(cfg, "performance.compile", default=None)
    wanted = False if value is None else parse_bool("performance.compile", value)
    if wanted and str(cfg.accelerator) == "cpu" and cpp_compiler() is None:
        raise ConfigError(
            "performance.compile=True: torch.compile needs a C++ compiler on the CPU and none "
            "was found (set CXX or install g++), or set performance.compile=False"
        )
    return wanted


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
