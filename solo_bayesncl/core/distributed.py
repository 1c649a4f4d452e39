"""Differentiable gathering of a batch across processes, for losses with global negatives.

The backward pass all-reduces the gathered gradient and keeps this process's rows (gloo has no
reduce-scatter); with DDP's averaging, parameters get the gradient of the mean loss over the
global batch, as one process on the whole batch would (as solo-learn's SimCLR loss gathers)."""

from __future__ import annotations

import os

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler

__all__ = [
    "gather_no_grad",
    "gather_with_grad",
    "is_distributed",
    "launched_as_rank_zero",
    "rank",
    "rank_seed",
    "whole_set_in_every_process",
]

#: Environment variables in which launchers give a process its place in a job, read before any
#: process group exists: torchrun (``RANK``, ``GROUP_RANK``), SLURM's srun (``SLURM_PROCID``), and
#: Lightning's own launcher, which starts the processes of ranks ``1..devices-1`` of a node
#: re-running the script with ``LOCAL_RANK`` (and ``NODE_RANK`` on every node but the first).
_RANK_ENV = ("RANK", "SLURM_PROCID", "LOCAL_RANK", "NODE_RANK", "GROUP_RANK")


def is_distributed() -> bool:
    """True when a default process group is initialised with more than one process."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def rank() -> int:
    """This process's rank, 0 without a process group."""
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def launched_as_rank_zero() -> bool:
    """True for the process that decides for the whole job (the one the user started, or global
    rank 0 under an external launcher), from the launchers' environment."""
    for key in _RANK_ENV:
        value = os.environ.get(key, "0").strip()
        if value.isdigit() and int(value) > 0:
            return False
    return True


def rank_seed(seed: int, rank: int) -> int:
    """The seed of global rank ``rank``'s random streams: rank 0 keeps ``seed``; the others are
    100,003 apart, so a seed that also counts epochs never repeats a stream."""
    return (seed + rank * 100_003) % 2**32


def _all_gather(x: torch.Tensor) -> list[torch.Tensor]:
    parts = [torch.empty_like(x) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, x.contiguous())
    return parts


class _GatherWithGrad(torch.autograd.Function):
    """Forward: every process's rows, in rank order. Backward: the sum over processes of the
    gradient of the gathered rows, of which this process keeps its own."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        ctx.rows = x.shape[0]
        return torch.cat(_all_gather(x), dim=0)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        summed = grad.contiguous().clone()
        dist.all_reduce(summed, op=dist.ReduceOp.SUM)
        start = dist.get_rank() * ctx.rows
        return summed[start : start + ctx.rows]


def gather_with_grad(x: torch.Tensor) -> torch.Tensor:
    """Concatenates ``x`` from every process along dim 0, keeping the autograd graph (every
    process must hold as many rows); ``x`` itself when not running distributed."""
    if not is_distributed():
        return x
    return _GatherWithGrad.apply(x)


def gather_no_grad(x: torch.Tensor) -> torch.Tensor:
    """Concatenates ``x`` (e.g. integer identifiers) from every process along dim 0, no gradient."""
    if not is_distributed():
        return x
    return torch.cat(_all_gather(x), dim=0)


def whole_set_in_every_process(loader: DataLoader) -> DataLoader:
    """``loader`` again, every sample once and in order in every process (Lightning's
    ``DistributedSampler`` pads shares with repeats, which solo-learn's mean would count twice)."""
    sampler = DistributedSampler(loader.dataset, num_replicas=1, rank=0, shuffle=False)
    return DataLoader(
        loader.dataset,
        batch_size=loader.batch_size,
        sampler=sampler,
        num_workers=loader.num_workers,
        collate_fn=loader.collate_fn,
        pin_memory=loader.pin_memory,
        drop_last=loader.drop_last,
        worker_init_fn=loader.worker_init_fn,
        persistent_workers=loader.persistent_workers,
    )
