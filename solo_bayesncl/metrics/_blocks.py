"""Blocks of rows and the buffers reused across them, for the metric functions that read a whole
matrix (or a large batch) a few rows at a time."""

from __future__ import annotations

from collections.abc import Iterator

import torch

#: Bytes of one block of rows in the one-shot functions (16 MiB). Each elementwise operation on a
#: block is one parallel region, so fewer, larger blocks cost less (on a loaded machine every
#: region waits for descheduled threads); past 32 MiB, though, each temporary is a fresh ``mmap``
#: whose page faults cost more than the operation. Blocks also keep the rows of float32 per-block
#: counts far below 2**24, where they stay exact.
BLOCK_BYTES: int = 2**24


def block_rows(num_dims: int, element_size: int = 4) -> int:
    """Rows per block for ``num_dims`` columns of ``element_size`` bytes (at least one row)."""
    return max(1, BLOCK_BYTES // (max(int(num_dims), 1) * int(element_size)))


def row_blocks(features: torch.Tensor) -> Iterator[tuple[int, torch.Tensor]]:
    """``(start, features[start : start + rows])`` for consecutive blocks of :func:`block_rows`."""
    rows = block_rows(features.shape[1], features.element_size())
    for start in range(0, features.shape[0], rows):
        yield start, features[start : start + rows]


class Workspace:
    """Block-sized buffers reused from one block of rows to the next (a fresh temporary is
    page-faulted anew, which costs more on a CPU than filling it); the next block overwrites them."""

    def __init__(self) -> None:
        self._buffers: dict[str, torch.Tensor] = {}

    def take(self, role: str, like: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
        """A ``like.shape`` buffer of ``dtype`` (default ``like``'s) on ``like``'s device."""
        dtype = like.dtype if dtype is None else dtype
        rows, cols = like.shape
        buffer = self._buffers.get(role)
        if (
            buffer is None
            or buffer.dtype != dtype
            or buffer.device != like.device
            or buffer.shape[1] != cols
            or buffer.shape[0] < rows
        ):
            buffer = torch.empty((rows, cols), dtype=dtype, device=like.device)
            self._buffers[role] = buffer
        return buffer[:rows]


def magnitudes_of(
    features: torch.Tensor, workspace: Workspace | None, role: str = "magnitudes"
) -> torch.Tensor:
    """``|F|`` in a workspace buffer (or a new tensor without one)."""
    if workspace is None:
        return features.abs()
    return torch.abs(features, out=workspace.take(role, features))


def above(
    values: torch.Tensor, eps: float, workspace: Workspace | None = None, role: str = "active"
) -> torch.Tensor:
    """``values > eps`` as zeros and ones of the values' dtype, in one operation (no bool mask to
    convert afterwards), in a workspace buffer when one is given."""
    out = torch.empty_like(values) if workspace is None else workspace.take(role, values)
    return torch.gt(values, eps, out=out)
