"""Differentiable gathering of a batch across processes, for losses with global negatives.

Under DDP every process holds part of the global batch. Contrastive losses compare each local
sample with every sample of the global batch, so the features of the other processes are
gathered with gradient: the backward pass sums, over processes, the gradients that every process's
loss gives to this process's features (``torch.distributed.nn.functional.all_gather``). Combined
with DDP's gradient averaging, parameters receive the gradient of the mean loss over the global
batch, exactly as a single process on the whole batch would (solo-learn's SimCLR loss gathers the
same way).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

__all__ = ["gather_no_grad", "gather_with_grad", "is_distributed", "rank"]


def is_distributed() -> bool:
    """True when a default process group is initialised with more than one process."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def rank() -> int:
    """This process's rank, 0 without a process group."""
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def gather_with_grad(x: torch.Tensor) -> torch.Tensor:
    """Concatenates ``x`` from every process along dim 0, keeping the autograd graph.

    Returns ``x`` itself when not running distributed.
    """
    if not is_distributed():
        return x
    from torch.distributed.nn.functional import all_gather  # its import changes warning filters

    return torch.cat(all_gather(x), dim=0)


def gather_no_grad(x: torch.Tensor) -> torch.Tensor:
    """Concatenates ``x`` (e.g. integer identifiers) from every process along dim 0, no gradient."""
    if not is_distributed():
        return x
    parts = [torch.empty_like(x) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, x.contiguous())
    return torch.cat(parts, dim=0)
