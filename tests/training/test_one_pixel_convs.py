"""``performance.one_pixel_convs``: a convolution with a one-pixel output computed as the matrix
product it is. Which convolutions qualify, that the product gives the convolution's output and
gradients (computed here by ``F.conv2d`` itself), that ResNet-18 at 32 px then runs no
convolution on a one-pixel output, that checkpoints keep their keys, and that a few training
steps of BayesNCL give the numbers of the plain convolutions to float tolerance."""

from __future__ import annotations

import helpers
import pytest
import torch
from omegaconf import OmegaConf
from torch import nn
from torch.nn import functional as F

from solo_bayesncl.config.checks import check_run_cfg
from solo_bayesncl.core.validation import ConfigError
from solo_bayesncl.training.one_pixel_convs import (
    OnePixelConv2d,
    decide_one_pixel_convs,
    one_pixel_convs_as_products,
    one_pixel_window,
)


def _conv(cin=3, cout=5, k=3, stride=1, padding=1, **kwargs) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, k, stride=stride, padding=padding, **kwargs)


@pytest.mark.parametrize(
    ("conv", "size", "window"),
    [
        (_conv(), 1, (slice(1, 2), slice(1, 2))),  # layer4's 3x3 convolutions on 1 x 1 maps
        (_conv(stride=2), 2, (slice(1, 3), slice(1, 3))),  # the stride-2 one entering layer4
        (_conv(k=1, padding=0), 1, (slice(0, 1), slice(0, 1))),
        (_conv(k=5, padding=1), 3, (slice(1, 4), slice(1, 4))),
        (_conv(k=5, padding=2), 3, None),  # nine output pixels
        (_conv(k=1, padding=0, stride=2), 2, None),  # one output pixel, seeing one of four
        (_conv(), 2, None),  # four output pixels
        (_conv(stride=2), 4, None),
        (_conv(k=3, padding=2, dilation=2), 1, None),
        (_conv(cin=4, cout=4, groups=2), 1, None),
        (_conv(padding_mode="reflect"), 1, None),
        (nn.Conv2d(3, 5, 3, padding="same"), 1, None),
    ],
)
def test_the_window_is_found_only_where_the_output_is_one_pixel_seeing_the_whole_input(
    conv, size, window
) -> None:
    assert one_pixel_window(conv, size, size) == window


def test_a_non_square_input_gets_its_own_rows_and_columns() -> None:
    assert one_pixel_window(_conv(k=3, padding=1), 1, 2) is None  # two output columns
    conv = nn.Conv2d(3, 5, (3, 5), padding=(1, 2))
    assert one_pixel_window(conv, 1, 1) == (slice(1, 2), slice(2, 3))


@pytest.mark.parametrize(
    ("k", "stride", "padding", "size", "bias", "channels_last"),
    [
        (3, 1, 1, 1, False, False),
        (3, 2, 1, 2, False, False),
        (3, 1, 1, 1, True, True),
        (3, 2, 1, 2, True, True),
        (1, 1, 0, 1, True, False),
        (5, 1, 1, 3, False, False),
        (3, 1, 1, 4, True, False),  # not one pixel: the ordinary convolution
        (1, 2, 0, 2, False, False),
    ],
)
def test_output_and_gradients_are_the_convolutions(
    k, stride, padding, size, bias, channels_last
) -> None:
    torch.manual_seed(0)
    conv = nn.Conv2d(16, 24, k, stride=stride, padding=padding, bias=bias)
    x = torch.randn(7, 16, size, size)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    x.requires_grad_(True)
    reference = F.conv2d(x, conv.weight, conv.bias, stride=stride, padding=padding)
    upstream = torch.randn_like(reference)
    wanted = torch.autograd.grad(
        reference, [x, conv.weight, *([conv.bias] if bias else [])], upstream
    )

    one_pixel_convs_as_products(conv)
    assert type(conv) is OnePixelConv2d
    out = conv(x)
    got = torch.autograd.grad(out, [x, conv.weight, *([conv.bias] if bias else [])], upstream)
    assert out.shape == reference.shape
    torch.testing.assert_close(out, reference)
    for g, w in zip(got, wanted, strict=True):
        torch.testing.assert_close(g, w)
    if one_pixel_window(conv, size, size) is not None:
        # the taps that only meet the padding get no gradient, as in the convolution
        rows, cols = one_pixel_window(conv, size, size)
        seen = torch.zeros_like(conv.weight, dtype=torch.bool)
        seen[:, :, rows, cols] = True
        assert torch.count_nonzero(got[1][~seen]) == 0


def _resnet18() -> nn.Module:
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10)
    model.fc = nn.Identity()
    return model


def _one_pixel_convolutions(model: nn.Module, x: torch.Tensor) -> list[str]:
    """The convolutions of ``model`` that run ``F.conv2d`` to give a one-pixel output on ``x``."""
    names = {module: name for name, module in model.named_modules()}
    seen: list[str] = []
    original = nn.Conv2d._conv_forward

    def spy(self, input, weight, bias):  # noqa: A002 - nn.Conv2d's name
        out = original(self, input, weight, bias)
        if out.shape[-2:] == (1, 1):
            seen.append(names[self])
        return out

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(nn.Conv2d, "_conv_forward", spy)
        model(x)
    return seen


def test_resnet18_at_32_pixels_runs_no_convolution_on_a_one_pixel_output() -> None:
    model = _resnet18()
    x = torch.randn(2, 3, 32, 32)
    before = _one_pixel_convolutions(model, x)
    assert before == [
        "layer4.0.conv1",
        "layer4.0.conv2",
        "layer4.0.downsample.0",  # 1x1 stride 2 on 2 x 2: sees one pixel of four, stays
        "layer4.1.conv1",
        "layer4.1.conv2",
    ]
    assert one_pixel_convs_as_products(model) == 20
    assert _one_pixel_convolutions(model, x) == ["layer4.0.downsample.0"]


def test_the_state_dict_and_the_parameters_are_the_models() -> None:
    plain = _resnet18()
    products = _resnet18()
    parameters = list(products.parameters())
    one_pixel_convs_as_products(products)
    assert list(products.parameters()) == parameters  # the same tensors: optimizers keep them
    for (name, value), (other, kept) in zip(
        plain.state_dict().items(), products.state_dict().items(), strict=True
    ):
        assert name == other
        assert torch.equal(value, kept)
    plain.load_state_dict(products.state_dict())  # a checkpoint loads either way
    products.load_state_dict(plain.state_dict())


def test_a_resnet18_step_gives_the_convolutions_gradients() -> None:
    plain, products = _resnet18(), _resnet18()
    one_pixel_convs_as_products(products)
    x = torch.randn(8, 3, 32, 32)
    for model in (plain, products):
        model(x).square().mean().backward()
    for (name, p), q in zip(plain.named_parameters(), products.parameters(), strict=True):
        apart = float((p.grad - q.grad).norm())
        assert apart <= 1e-4 * float(p.grad.norm()) + 1e-8, name


def test_subclasses_of_conv2d_are_left_alone() -> None:
    class Standardised(nn.Conv2d):  # computes something else with the same weight
        pass

    model = nn.Sequential(Standardised(3, 4, 3, padding=1), nn.Conv2d(4, 4, 3, padding=1))
    assert one_pixel_convs_as_products(model) == 1
    assert type(model[0]) is Standardised
    assert type(model[1]) is OnePixelConv2d


def test_on_unless_turned_off_and_other_values_refused_in_one_line() -> None:
    assert decide_one_pixel_convs(OmegaConf.create({})) is True
    assert decide_one_pixel_convs(OmegaConf.create({"performance": {}})) is True
    off = OmegaConf.create({"performance": {"one_pixel_convs": "false"}})
    assert decide_one_pixel_convs(off) is False
    assert check_run_cfg(off).performance.one_pixel_convs is False
    with pytest.raises(ConfigError) as err:
        check_run_cfg(OmegaConf.create({"performance": {"one_pixel_convs": "fast"}}))
    assert str(err.value) == (
        "performance.one_pixel_convs='fast' is not a boolean; allowed: true, false (or 1, 0)"
    )


def test_pretraining_lays_the_model_out_with_products_unless_turned_off() -> None:
    pytest.importorskip("solo", reason="needs upstream solo-learn installed")
    from solo_bayesncl.training.fit import seed_and_layout

    def cfg(**performance):
        return OmegaConf.create(
            {"seed": 3, "performance": {"disable_channel_last": True, **performance}}
        )

    model = seed_and_layout(cfg(), _resnet18)
    assert type(model.layer4[1].conv2) is OnePixelConv2d
    model = seed_and_layout(cfg(one_pixel_convs=False), _resnet18)
    assert type(model.layer4[1].conv2) is nn.Conv2d


def test_a_few_bayesncl_steps_are_the_same_with_products_and_with_convolutions(
    image_folder,
) -> None:
    """BayesNCL from its shipped config at 32 px (the ImageNet stem: 1 x 1 maps in layer4), laid
    out as pretraining lays it out, three LARS steps on one batch of real images each way."""
    pytest.importorskip("solo", reason="needs upstream solo-learn installed")
    from solo_bayesncl.training.pretrain import prepare_pretrain_cfg

    batch = helpers.real_image_batch(image_folder)
    assert batch[1][0].shape[-2:] == (32, 32)

    def train(one_pixel_convs: bool):
        overrides = [
            *helpers.image_folder_overrides(image_folder),
            "method_kwargs.proj_hidden_dim=64",
            "method_kwargs.proj_output_dim=32",
            "optimizer.batch_size=8",
            "accelerator=cpu",
            f"++performance.one_pixel_convs={one_pixel_convs}",
        ]
        cfg = prepare_pretrain_cfg(
            helpers.compose("scripts/pretrain/cifar", "bayesncl.yaml", overrides), check_data=False
        )
        losses, first_grads, model = helpers.few_training_steps(cfg, batch)
        assert (type(model.backbone.layer4[1].conv2) is OnePixelConv2d) is one_pixel_convs
        return losses, first_grads

    conv_losses, conv_grads = train(False)
    product_losses, product_grads = train(True)
    assert conv_losses[-1] != conv_losses[0]  # the steps did train
    assert product_losses == pytest.approx(conv_losses, rel=1e-4)
    helpers.assert_gradients_close(conv_grads, product_grads, rel=1e-4)
