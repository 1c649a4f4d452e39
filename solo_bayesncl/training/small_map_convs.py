"""Convolutions on maps of a few pixels, computed as the matrix products they are
(``performance.small_map_convs``).

A ResNet with the ImageNet stem shrinks a 32-pixel image to 2 x 2 pixels in ``layer3`` and to
1 x 1 in ``layer4``. A convolution is a linear map from its input's ``C x H x W`` values to its
output's ``O x H' x W'`` values: flattening the pixels (``q`` of the input, ``p`` of the output),

    y[n, o, p] = sum over c, q of x[n, c, q] * w[o, c, t(p, q)]  (+ bias[o])

where ``t(p, q)`` is the tap linking output pixel ``p`` to input pixel ``q`` (zero weight where
none does). With no more input pixels than taps this does no more multiplications, and oneDNN's
CPU kernels handled these shapes poorly (docs/training.md, "Convolutions on small maps").
Parameters and ``state_dict`` keys stay the same; results agree to float rounding.
"""

from __future__ import annotations

import functools

import torch
from torch import nn
from torch.nn import functional as F

__all__ = [
    "SmallMapConv2d",
    "small_map_convs_as_products",
    "tap_of_each_pixel_pair",
]


def tap_of_each_pixel_pair(conv: nn.Conv2d, height: int, width: int) -> torch.Tensor | None:
    """For an input of ``height`` x ``width`` pixels, the ``(H', W', H W)`` tensor whose entry
    ``[i, j, q]`` is the flat kernel index ``t(p, q)`` linking output pixel ``p = (i, j)`` to input
    pixel ``q`` (``k_h k_w`` where none does); None when the product would do more
    multiplications, differ from the convolution (groups, padding) or the input is too small."""
    if conv.groups != 1 or conv.padding_mode != "zeros" or isinstance(conv.padding, str):
        return None
    return _tap_index(conv.kernel_size, conv.stride, conv.padding, conv.dilation, height, width)


@functools.lru_cache(maxsize=64)
def _tap_index(
    kernel: tuple[int, ...],
    stride: tuple[int, ...],
    padding: tuple[int, ...],
    dilation: tuple[int, ...],
    height: int,
    width: int,
) -> torch.Tensor | None:
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel, stride, padding, dilation
    if height * width > kh * kw:
        return None
    out_h = (height + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    out_w = (width + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    if out_h < 1 or out_w < 1:
        return None
    index = torch.full((out_h, out_w, height * width), kh * kw, dtype=torch.long)
    for i in range(out_h):
        for j in range(out_w):
            for a in range(kh):
                row = i * sh - ph + a * dh
                if not 0 <= row < height:
                    continue
                for b in range(kw):
                    col = j * sw - pw + b * dw
                    if 0 <= col < width:
                        index[i, j, row * width + col] = a * kw + b
    return index


@functools.lru_cache(maxsize=64)
def _tap_selection(
    index: torch.Tensor, taps: int, dtype: torch.dtype, device: torch.device
) -> torch.Tensor:
    """The ``(k_h k_w, H' W' H W)`` 0/1 matrix placing each tap at the pixel pairs it links
    (``index``: :func:`tap_of_each_pixel_pair`'s, cached per shape)."""
    one_hot = F.one_hot(index.flatten(), num_classes=taps + 1)[:, :taps]
    return one_hot.t().to(device=device, dtype=dtype).contiguous()


class SmallMapConv2d(nn.Conv2d):
    """An ``nn.Conv2d`` computing one matrix product where :func:`tap_of_each_pixel_pair` allows."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:  # noqa: A002 - nn.Conv2d's name
        if input.dim() != 4:
            return super().forward(input)
        index = tap_of_each_pixel_pair(self, input.shape[-2], input.shape[-1])
        if index is None:
            return super().forward(input)
        out_h, out_w, in_pixels = index.shape
        taps = self.kernel_size[0] * self.kernel_size[1]
        selection = _tap_selection(index, taps, self.weight.dtype, self.weight.device)
        channels = self.out_channels * self.in_channels
        linear_map = (self.weight.reshape(channels, -1) @ selection).view(
            self.out_channels, self.in_channels, out_h * out_w, in_pixels
        )  # O x C x H'W' x HW, made O H'W' x C HW below
        linear_map = linear_map.transpose(1, 2).reshape(self.out_channels * out_h * out_w, -1)
        bias = None if self.bias is None else self.bias.repeat_interleave(out_h * out_w)
        out = F.linear(input.reshape(input.shape[0], -1), linear_map, bias)
        out = out.view(input.shape[0], self.out_channels, out_h, out_w)
        if not input.is_contiguous() and input.is_contiguous(memory_format=torch.channels_last):
            out = out.contiguous(memory_format=torch.channels_last)
        return out


def small_map_convs_as_products(model: nn.Module) -> int:
    """Turns every module of ``model`` whose class is exactly ``nn.Conv2d`` into
    :class:`SmallMapConv2d`, in place (only ``forward`` changes); returns how many."""
    convs = [m for m in model.modules() if type(m) is nn.Conv2d]
    for conv in convs:
        conv.__class__ = SmallMapConv2d
    return len(convs)
