"""``performance.small_map_convs``: a convolution on an input of no more pixels than its kernel
has taps computed as the matrix product it is. Which convolutions qualify and which tap links
each pair of pixels (against the linear map ``F.conv2d`` itself gives on one-hot inputs), that
the product gives the convolution's output and gradients, that ResNet-18 at 32 px then convolves
only where the product would do more multiplications, that checkpoints keep their keys, and that
a few training steps of BayesNCL give the numbers of the plain convolutions to float tolerance."""

from __future__ import annotations

import helpers
import pytest
import torch
from omegaconf import OmegaConf
from torch import nn
from torch.nn import functional as F

from solo_bayesncl.config.checks import check_run_cfg
from solo_bayesncl.config.runtime import performance_settings
from solo_bayesncl.core.validation import ConfigError
from solo_bayesncl.training.small_map_convs import (
    SmallMapConv2d,
    small_map_convs_as_products,
    tap_of_each_pixel_pair,
)


def _conv(cin=3, cout=5, k=3, stride=1, padding=1, **kwargs) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, k, stride=stride, padding=padding, **kwargs)


def test_the_taps_of_layer3_and_layer4_shapes_written_out() -> None:
    # 3x3, padding 1 on 1 x 1: only the centre tap (flat index 4) sees the pixel
    assert tap_of_each_pixel_pair(_conv(), 1, 1).tolist() == [[[4]]]
    # 3x3, padding 1 on 2 x 2: output pixel (0, 0) sees the input through taps 4, 5, 7, 8, ...
    assert tap_of_each_pixel_pair(_conv(), 2, 2).tolist() == [
        [[4, 5, 7, 8], [3, 4, 6, 7]],
        [[1, 2, 4, 5], [0, 1, 3, 4]],
    ]
    # 3x3, stride 2, padding 1 on 2 x 2 (entering layer4): one output pixel, taps 4, 5, 7, 8
    assert tap_of_each_pixel_pair(_conv(stride=2), 2, 2).tolist() == [[[4, 5, 7, 8]]]
    # 1x1 on 1 x 1 with padding 1: the corners see only padding (k_h k_w = 1 marks "no tap")
    assert tap_of_each_pixel_pair(_conv(k=1, padding=1), 1, 1).tolist() == [
        [[1], [1], [1]],
        [[1], [0], [1]],
        [[1], [1], [1]],
    ]


@pytest.mark.parametrize(
    ("conv", "height", "width"),
    [
        (_conv(), 1, 1),
        (_conv(), 2, 2),
        (_conv(stride=2), 2, 2),
        (_conv(), 3, 3),  # nine pixels, nine taps
        (_conv(), 1, 2),
        (_conv(k=5, padding=2), 4, 5),
        (nn.Conv2d(3, 5, (3, 5), padding=(1, 2)), 2, 3),
        (_conv(k=3, padding=2, dilation=2), 2, 2),
        (_conv(k=3, padding=0, stride=2), 3, 3),
        (_conv(k=1, padding=0), 1, 1),
        (_conv(k=1, padding=1), 1, 1),
    ],
)
def test_the_linear_map_is_the_one_f_conv2d_computes(conv, height, width) -> None:
    """Each input pixel's column of the convolution's linear map, read off ``F.conv2d`` applied
    to a one-hot image, against the taps the index picks."""
    index = tap_of_each_pixel_pair(conv, height, width)
    assert index is not None
    with torch.no_grad():
        weight = torch.randn_like(conv.weight)
        taps = F.pad(weight.flatten(2), (0, 1))  # the extra zero tap: "no tap"
        for q in range(height * width):
            one_hot = torch.zeros(1, conv.in_channels, height * width)
            for c in range(conv.in_channels):
                one_hot.zero_()
                one_hot[0, c, q] = 1
                image = one_hot.view(1, conv.in_channels, height, width)
                column = F.conv2d(image, weight, None, conv.stride, conv.padding, conv.dilation)[
                    0
                ]  # O x H' x W'
                assert column.shape[-2:] == index.shape[:2]
                picked = taps[:, c, index[..., q]]  # O x H' x W'
                torch.testing.assert_close(column, picked)


@pytest.mark.parametrize(
    ("conv", "size"),
    [
        (_conv(), 4),  # 16 pixels, 9 taps: the convolution does fewer multiplications
        (_conv(stride=2), 4),  # entering layer3: 16 pixels
        (_conv(k=1, padding=0, stride=2), 2),  # layer4's 1x1 shortcut: 4 pixels, 1 tap
        (_conv(cin=4, cout=4, groups=2), 1),
        (_conv(padding_mode="reflect"), 1),
        (nn.Conv2d(3, 5, 3, padding="same"), 1),
        (_conv(k=3, padding=0), 2),  # no output pixel: F.conv2d's own error
    ],
)
def test_no_product_where_it_is_not_the_convolution_or_costs_more(conv, size) -> None:
    assert tap_of_each_pixel_pair(conv, size, size) is None


@pytest.mark.parametrize(
    ("k", "stride", "padding", "size", "bias", "channels_last"),
    [
        (3, 1, 1, 1, False, False),
        (3, 2, 1, 2, False, False),
        (3, 1, 1, 2, True, False),
        (3, 1, 1, 2, False, True),
        (3, 1, 1, 1, True, True),
        (3, 2, 1, 2, True, True),
        (1, 1, 0, 1, True, False),
        (5, 1, 1, 3, False, False),
        (3, 1, 1, 4, True, False),  # sixteen pixels: the ordinary convolution
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

    small_map_convs_as_products(conv)
    assert type(conv) is SmallMapConv2d
    out = conv(x)
    got = torch.autograd.grad(out, [x, conv.weight, *([conv.bias] if bias else [])], upstream)
    assert out.shape == reference.shape
    torch.testing.assert_close(out, reference)
    for g, w in zip(got, wanted, strict=True):
        torch.testing.assert_close(g, w)
    assert out.is_contiguous(memory_format=torch.channels_last) is reference.is_contiguous(
        memory_format=torch.channels_last
    )
    index = tap_of_each_pixel_pair(conv, size, size)
    if index is not None:
        # the taps that only meet the padding get no gradient, as in the convolution
        seen = torch.zeros(k * k + 1, dtype=torch.bool)
        seen[index.flatten()] = True
        unseen = ~seen[: k * k].view(k, k)
        assert torch.count_nonzero(got[1][:, :, unseen]) == 0


def _resnet18() -> nn.Module:
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10)
    model.fc = nn.Identity()
    return model


def _convolving(model: nn.Module, x: torch.Tensor) -> list[str]:
    """The convolutions of ``model`` that run ``F.conv2d`` on ``x``."""
    names = {module: name for name, module in model.named_modules()}
    seen: list[str] = []
    original = nn.Conv2d._conv_forward

    def spy(self, input, weight, bias):  # noqa: A002 - nn.Conv2d's name
        seen.append(names[self])
        return original(self, input, weight, bias)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(nn.Conv2d, "_conv_forward", spy)
        model(x)
    return seen


def test_resnet18_at_32_pixels_convolves_only_maps_of_more_pixels_than_taps() -> None:
    model = _resnet18()
    x = torch.randn(2, 3, 32, 32)
    everything = _convolving(model, x)
    assert len(everything) == 20
    assert small_map_convs_as_products(model) == 20
    assert _convolving(model, x) == [
        "conv1",  # 32 x 32
        *[f"layer1.{b}.conv{i}" for b in (0, 1) for i in (1, 2)],  # 8 x 8
        "layer2.0.conv1",
        "layer2.0.conv2",
        "layer2.0.downsample.0",
        "layer2.1.conv1",
        "layer2.1.conv2",  # 4 x 4
        "layer3.0.conv1",  # 4 x 4 entering, stride 2
        "layer3.0.downsample.0",  # 1x1 on 4 x 4
        "layer4.0.downsample.0",  # 1x1 stride 2 on 2 x 2: four pixels, one tap
    ]


def test_the_state_dict_and_the_parameters_are_the_models() -> None:
    plain = _resnet18()
    products = _resnet18()
    parameters = list(products.parameters())
    small_map_convs_as_products(products)
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
    small_map_convs_as_products(products)
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
    assert small_map_convs_as_products(model) == 1
    assert type(model[0]) is Standardised
    assert type(model[1]) is SmallMapConv2d


@pytest.mark.solo  # needs Lightning, installed with solo-learn
def test_on_unless_turned_off_and_other_values_refused_in_one_line() -> None:
    assert performance_settings(None, "cpu").small_map_convs is True
    assert performance_settings({}, "cpu").small_map_convs is True
    off = OmegaConf.create({"performance": {"small_map_convs": "false"}})
    assert performance_settings(off.performance, "cpu").small_map_convs is False
    assert check_run_cfg(off).performance.small_map_convs is False
    with pytest.raises(ConfigError) as err:
        check_run_cfg(OmegaConf.create({"performance": {"small_map_convs": "fast"}}))
    assert str(err.value) == (
        "performance.small_map_convs='fast' is not a boolean; allowed: true, false (or 1, 0)"
    )


@pytest.mark.solo  # needs Lightning, installed with solo-learn
# one_pixel_convs: this key's name before it covered 2 x 2 maps; channels_last_max_pool: removed
@pytest.mark.parametrize("key", ["one_pixel_convs", "channels_last_max_pool"])
def test_a_performance_key_the_plugin_does_not_read_is_refused_naming_the_known_ones(key) -> None:
    with pytest.raises(ConfigError) as err:
        check_run_cfg(OmegaConf.create({"performance": {key: False}}))
    assert str(err.value) == (
        f"performance has unknown key(s) {key}; known keys: compile, "
        "disable_channel_last, small_map_convs"
    )


def test_pretraining_lays_the_model_out_with_products_unless_turned_off() -> None:
    pytest.importorskip("solo", reason="needs upstream solo-learn installed")
    from solo_bayesncl.training.fit import seed_and_layout

    def cfg(**performance):
        return OmegaConf.create(
            {"seed": 3, "performance": {"disable_channel_last": True, **performance}}
        )

    model = seed_and_layout(3, performance_settings(cfg().performance, "cpu"), _resnet18)
    assert type(model.layer4[1].conv2) is SmallMapConv2d
    off = cfg(small_map_convs=False).performance
    model = seed_and_layout(3, performance_settings(off, "cpu"), _resnet18)
    assert type(model.layer4[1].conv2) is nn.Conv2d


def test_a_few_bayesncl_steps_are_the_same_with_products_and_with_convolutions(
    image_folder,
) -> None:
    """BayesNCL from its shipped config at 32 px (the ImageNet stem: 2 x 2 maps in layer3, 1 x 1
    in layer4), laid out as pretraining lays it out, three LARS steps on one batch of real images each way."""
    pytest.importorskip("solo", reason="needs upstream solo-learn installed")
    batch = helpers.real_image_batch(image_folder)
    assert batch[1][0].shape[-2:] == (32, 32)

    def train(small_map_convs: bool):
        extra = [f"++performance.small_map_convs={small_map_convs}"]
        cfg = helpers.small_bayesncl_cfg(image_folder, extra)
        losses, first_grads, model = helpers.few_training_steps(cfg, batch)
        assert (type(model.backbone.layer3[1].conv2) is SmallMapConv2d) is small_map_convs
        return losses, first_grads

    helpers.assert_same_training_to_rounding(train(False), train(True))
