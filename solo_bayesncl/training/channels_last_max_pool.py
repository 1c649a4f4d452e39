"""Max-pooling of a contiguous model on the CPU, computed by the channels-last kernel
(``performance.channels_last_max_pool``).

On the CPU a model keeps solo-learn's contiguous layout, and PyTorch's max-pooling kernel for
contiguous inputs is far slower than its channels-last one (docs/training.md, "Max-pooling on the
CPU", has the figures). So the pooling here copies its input to channels-last, pools with that
kernel and hands back a contiguous output; the backward is PyTorch's own, with the indices the
forward found. Both kernels scan each window in the same order and keep the first largest value
(a NaN wins), so outputs, indices and gradients are equal bit for bit.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.autograd.function import once_differentiable
from torch.nn.modules.utils import _pair

from solo_bayesncl.training.layer_swaps import swap_exact_class

__all__ = [
    "ChannelsLastMaxPool2d",
    "max_pools_via_channels_last",
]

_Pooling = tuple[list[int], list[int], list[int], list[int], bool]


class _MaxPoolViaChannelsLast(torch.autograd.Function):
    """Forward by the channels-last kernel, backward by PyTorch's, both on contiguous tensors."""

    @staticmethod
    def forward(ctx, input: torch.Tensor, pooling: _Pooling) -> torch.Tensor:  # noqa: A002
        kernel, stride, padding, dilation, ceil_mode = pooling
        output, indices = torch.ops.aten.max_pool2d_with_indices(
            input.contiguous(memory_format=torch.channels_last),
            kernel,
            stride,
            padding,
            dilation,
            ceil_mode,
        )
        indices = indices.contiguous()
        ctx.save_for_backward(input, indices)
        ctx.pooling = pooling
        ctx.mark_non_differentiable(indices)
        return output.contiguous()

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_output: torch.Tensor) -> tuple[torch.Tensor, None]:
        input, indices = ctx.saved_tensors  # noqa: A001
        grad_input = torch.ops.aten.max_pool2d_with_indices_backward(
            grad_output.contiguous(), input, *ctx.pooling, indices
        )
        return grad_input, None


class ChannelsLastMaxPool2d(nn.MaxPool2d):
    """An ``nn.MaxPool2d`` that pools a contiguous 4-d CPU input with the channels-last kernel;
    other inputs, returned indices and a traced forward run ``nn.MaxPool2d``'s own."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:  # noqa: A002 - nn.MaxPool2d's name
        if (
            self.return_indices
            or input.dim() != 4
            or input.device.type != "cpu"
            or not input.is_contiguous()
            or input.is_contiguous(memory_format=torch.channels_last)  # 1 x 1 maps: both
            or torch.compiler.is_compiling()  # the compiler writes its own pooling
        ):
            return super().forward(input)
        pooling: _Pooling = (
            list(_pair(self.kernel_size)),
            list(_pair(self.stride if self.stride is not None else self.kernel_size)),
            list(_pair(self.padding)),
            list(_pair(self.dilation)),
            bool(self.ceil_mode),
        )
        if not (torch.is_grad_enabled() and input.requires_grad):
            with torch.no_grad():  # no indices to keep
                cl = input.contiguous(memory_format=torch.channels_last)
                return torch.ops.aten.max_pool2d(cl, *pooling).contiguous()
        return _MaxPoolViaChannelsLast.apply(input, pooling)


def max_pools_via_channels_last(model: nn.Module) -> int:
    """Turns every plain ``nn.MaxPool2d`` of ``model`` into :class:`ChannelsLastMaxPool2d`, in
    place; returns how many."""
    return swap_exact_class(model, nn.MaxPool2d, ChannelsLastMaxPool2d)
