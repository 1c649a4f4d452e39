"""Boolean masks packed eight columns to a byte, on the mask's own device.

The layout is NumPy's ``packbits(mask, axis=1)`` (the first column in the most significant bit,
the last byte zero-padded): on the CPU NumPy packs and unpacks (no copy in or out), elsewhere the
same bytes come from tensor operations, so a CUDA mask never leaves the device.
"""

from __future__ import annotations

import numpy as np
import torch

_SHIFTS = (7, 6, 5, 4, 3, 2, 1, 0)


def pack_tensor(mask: torch.Tensor) -> torch.Tensor:
    """``(B, k)`` bool (or 0/1) to ``(B, ceil(k / 8))`` uint8 with tensor operations."""
    rows, cols = mask.shape
    bits = mask.to(torch.uint8)
    if cols % 8:
        bits = torch.nn.functional.pad(bits, (0, 8 - cols % 8))
    weights = torch.tensor([1 << s for s in _SHIFTS], dtype=torch.uint8, device=mask.device)
    return (bits.view(rows, -1, 8) * weights).sum(dim=2, dtype=torch.uint8)


def unpack_tensor(packed: torch.Tensor, num_dims: int, dtype: torch.dtype) -> torch.Tensor:
    """``(B, ceil(k / 8))`` uint8 to ``(B, k)`` zeros and ones of ``dtype`` (any device)."""
    shifts = torch.tensor(_SHIFTS, dtype=torch.uint8, device=packed.device)
    bits = (packed[:, :, None] >> shifts) & 1
    return bits.view(packed.shape[0], -1)[:, :num_dims].to(dtype)


def pack_mask(mask: torch.Tensor) -> torch.Tensor:
    """Pack a ``(B, k)`` mask of 0/1 (NumPy on the CPU, :func:`pack_tensor` elsewhere)."""
    if mask.device.type == "cpu":
        bits = mask.numpy()
        return torch.from_numpy(np.packbits(bits if bits.dtype == np.bool_ else bits != 0, axis=1))
    return pack_tensor(mask)


def unpack_mask(packed: torch.Tensor, num_dims: int, dtype: torch.dtype) -> torch.Tensor:
    """Unpack to ``(B, k)`` zeros and ones of ``dtype`` (NumPy on the CPU, else tensors)."""
    if packed.device.type == "cpu":
        bits = np.unpackbits(packed.numpy(), axis=1, count=num_dims)
        return torch.from_numpy(bits).to(dtype)
    return unpack_tensor(packed, num_dims, dtype)
