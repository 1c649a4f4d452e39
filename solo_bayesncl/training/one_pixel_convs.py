"""Convolutions whose output is one pixel, computed as the matrix product they are
(``performance.one_pixel_convs``).

A ResNet with the ImageNet stem shrinks a 32-pixel image to 2 x 2 pixels before ``layer4`` and
to 1 x 1 inside it: the stride-2 3x3 convolution that enters ``layer4`` and the three 3x3
convolutions after it each give one output pixel per image. When that one output window holds
the whole input, every tap that falls outside the input multiplies the zero padding, so the
convolution is exactly the matrix product of the flattened input with the taps that see it:

    y[n, o] = sum over c, r, s of x[n, c, r, s] * w[o, c, r + pad_h, s + pad_w]  (+ bias[o])

for an input of H x W pixels with ``pad_h + H <= k_h`` and ``pad_w + W <= k_w``, any stride that
gives one output pixel, dilation 1, zero padding and one group. The weight gradient of the taps
outside the input is zero either way (they only ever meet the padding).

Why bother: oneDNN's CPU kernels handled these shapes poorly on the AVX2 CPU measured. On two
AMD EPYC (Zen 3, no AVX-512) cores, the weight gradient of a 512-channel 3x3 convolution on
1 x 1 inputs took 5.7 times its forward, and with the products BayesNCL's whole step at 2 x 256
views took 0.49 of its time (docs/training.md, "One-pixel convolutions", has the figures and
the command). Everywhere, the products skip the multiplications by the padding, about a fifth
of the step's FLOPs at 32 px; their speed on CPUs with AVX-512 and on GPUs was not measured.
Nothing else changes: the module keeps its class's parameters, buffers and ``state_dict`` keys
(checkpoints are the same), inputs of any other size run the ordinary convolution, and the
results agree with it to float rounding (the sums run in another order), not bit for bit.
"""

from __future__ import annotations

import omegaconf
import torch
from omegaconf import OmegaConf
from torch import nn
from torch.nn import functional as F

from solo_bayesncl.core.validation import parse_bool

__all__ = [
    "OnePixelConv2d",
    "decide_one_pixel_convs",
    "one_pixel_convs_as_products",
    "one_pixel_window",
]


def one_pixel_window(conv: nn.Conv2d, height: int, width: int) -> tuple[slice, slice] | None:
    """The kernel rows and columns that see an input of ``height`` x ``width`` pixels when the
    convolution gives one output pixel whose window holds the whole input; None otherwise
    (then the convolution is not a plain matrix product of the flattened input)."""
    if (
        conv.groups != 1
        or conv.padding_mode != "zeros"
        or isinstance(conv.padding, str)
        or conv.dilation != (1, 1)
    ):
        return None
    (kh, kw), (sh, sw), (ph, pw) = conv.kernel_size, conv.stride, conv.padding
    one_output = (height + 2 * ph - kh) // sh == 0 and (width + 2 * pw - kw) // sw == 0
    if not one_output or ph + height > kh or pw + width > kw:
        return None
    return slice(ph, ph + height), slice(pw, pw + width)


class OnePixelConv2d(nn.Conv2d):
    """An ``nn.Conv2d`` that computes a one-pixel output as a matrix product (module docstring);
    every other input runs ``nn.Conv2d``'s own forward."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:  # noqa: A002 - nn.Conv2d's name
        if input.dim() != 4:
            return super().forward(input)
        window = one_pixel_window(self, input.shape[-2], input.shape[-1])
        if window is None:
            return super().forward(input)
        rows, cols = window
        taps = self.weight[:, :, rows, cols].reshape(self.out_channels, -1)
        out = F.linear(input.reshape(input.shape[0], -1), taps, self.bias)
        return out.view(input.shape[0], self.out_channels, 1, 1)


def one_pixel_convs_as_products(model: nn.Module) -> int:
    """Turns every plain ``nn.Conv2d`` of ``model`` (not a subclass, which may compute something
    else) into :class:`OnePixelConv2d`, in place, keeping its parameters; returns how many."""
    count = 0
    for module in model.modules():
        if type(module) is nn.Conv2d:
            module.__class__ = OnePixelConv2d
            count += 1
    return count


def decide_one_pixel_convs(cfg: omegaconf.DictConfig) -> bool:
    """``performance.one_pixel_convs`` (left out: True); a value that is not a boolean raises
    :class:`~solo_bayesncl.core.validation.ConfigError` naming the key."""
    value = OmegaConf.select(cfg, "performance.one_pixel_convs", default=None)
    return True if value is None else parse_bool("performance.one_pixel_convs", value)
