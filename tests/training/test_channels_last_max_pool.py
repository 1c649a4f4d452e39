"""``performance.channels_last_max_pool``: a contiguous model's max-pooling on the CPU computed by
the channels-last kernel. The outputs and gradients are ``nn.MaxPool2d``'s bit for bit (ties and
NaNs included), inputs it does not cover run ``nn.MaxPool2d``'s own forward, pretraining lays a
contiguous model out with it unless turned off, and BayesNCL's training steps are the same to the
last bit with and without it."""

from __future__ import annotations

import helpers
import pytest
import torch
from omegaconf import OmegaConf
from torch import nn

from solo_bayesncl.config.checks import check_run_cfg
from solo_bayesncl.config.runtime import performance_settings
from solo_bayesncl.core.validation import ConfigError
from solo_bayesncl.training.channels_last_max_pool import (
    ChannelsLastMaxPool2d,
    max_pools_via_channels_last,
)
from solo_bayesncl.training.layer_swaps import swap_exact_class


def _pair_of_pools(**kwargs) -> tuple[nn.MaxPool2d, nn.MaxPool2d]:
    plain = nn.MaxPool2d(**kwargs)
    other = nn.MaxPool2d(**kwargs)
    assert max_pools_via_channels_last(other) == 1
    assert type(other) is ChannelsLastMaxPool2d
    return plain, other


def _activations(shape: tuple[int, ...], seed: int = 0) -> torch.Tensor:
    """ReLU outputs (many windows of zeros) with positive ties: every other pixel copied to its
    neighbour, so that which of two equal maxima a pooling keeps decides where gradients go."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=generator).relu()
    x[..., ::2, 1::2] = x[..., ::2, ::2][..., : x[..., ::2, 1::2].shape[-1]]
    return x


@pytest.mark.parametrize(
    "pooling",
    [
        {"kernel_size": 3, "stride": 2, "padding": 1},  # ResNet's stem
        {"kernel_size": 2},
        {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True},
        {"kernel_size": (3, 2), "stride": (1, 2), "padding": (1, 0), "dilation": (2, 1)},
    ],
)
@pytest.mark.parametrize("shape", [(4, 6, 15, 15), (3, 5, 16, 9)])
def test_outputs_and_gradients_are_nn_max_pool2ds_bit_for_bit(pooling, shape) -> None:
    plain, other = _pair_of_pools(**pooling)
    x = _activations(shape)
    x[0, 0, 0, 0] = float("nan")  # a NaN wins its windows in both
    ours = x.clone().requires_grad_()
    theirs = x.clone().requires_grad_()
    got, expected = other(ours), plain(theirs)
    assert got.is_contiguous()
    assert torch.equal(got.nan_to_num(-1.0), expected.nan_to_num(-1.0))
    assert torch.isnan(got).equal(torch.isnan(expected)) and torch.isnan(got).any()
    grad = torch.randn(expected.shape, generator=torch.Generator().manual_seed(1))
    got.backward(grad)
    expected.backward(grad)
    assert ours.grad.is_contiguous()
    assert torch.equal(ours.grad, theirs.grad)
    with torch.no_grad():  # evaluation: no indices kept, the same values
        assert torch.equal(other(x).nan_to_num(-1.0), expected.detach().nan_to_num(-1.0))


def test_the_pooling_is_the_channels_last_kernels(monkeypatch) -> None:
    """The point of the module: the contiguous input reaches the kernel in channels-last."""
    seen: list[bool] = []
    kernel = torch.ops.aten.max_pool2d_with_indices

    class Spy:
        def __call__(self, input, *args):  # noqa: A002
            seen.append(input.is_contiguous(memory_format=torch.channels_last))
            return kernel(input, *args)

    monkeypatch.setattr(torch.ops.aten, "max_pool2d_with_indices", Spy())
    _, other = _pair_of_pools(kernel_size=3, stride=2, padding=1)
    other(torch.randn(2, 4, 8, 8, requires_grad=True)).sum().backward()
    assert seen == [True]


@pytest.mark.parametrize(
    "make_input",
    [
        lambda: torch.randn(4, 9, 9),  # unbatched
        lambda: torch.randn(2, 4, 9, 9).to(memory_format=torch.channels_last),
        lambda: torch.randn(2, 4, 9, 18)[..., ::2],  # neither layout
    ],
    ids=["3-d", "channels-last", "strided"],
)
def test_other_inputs_run_nn_max_pool2ds_own_forward(make_input, monkeypatch) -> None:
    plain, other = _pair_of_pools(kernel_size=3, stride=2, padding=1)
    x = make_input()
    monkeypatch.setattr(
        torch.ops.aten, "max_pool2d_with_indices", lambda *a: pytest.fail("not left alone")
    )
    calls: list[int] = []
    original = nn.MaxPool2d.forward
    monkeypatch.setattr(
        nn.MaxPool2d, "forward", lambda self, i: calls.append(1) or original(self, i)
    )
    assert torch.equal(other(x), plain(x))
    assert len(calls) == 2


def test_a_pooling_that_returns_its_indices_is_nn_max_pool2ds() -> None:
    plain, other = _pair_of_pools(kernel_size=2, return_indices=True)
    x = _activations((2, 3, 8, 8))
    (values, indices), (expected, expected_indices) = other(x), plain(x)
    assert torch.equal(values, expected) and torch.equal(indices, expected_indices)


def test_subclasses_are_left_alone_and_nothing_is_stored() -> None:
    class Other(nn.MaxPool2d):  # may compute something else
        pass

    model = nn.Sequential(Other(2), nn.MaxPool2d(2), nn.Conv2d(3, 3, 1))
    state = {k: v.clone() for k, v in model.state_dict().items()}
    assert max_pools_via_channels_last(model) == 1
    assert type(model[0]) is Other and type(model[1]) is ChannelsLastMaxPool2d
    assert model.state_dict().keys() == state.keys()  # checkpoints are the same


def test_only_a_subclass_can_take_a_layers_place() -> None:
    model = nn.Sequential(nn.Conv2d(3, 3, 1))
    with pytest.raises(TypeError, match="^ChannelsLastMaxPool2d is not a subclass of Conv2d$"):
        swap_exact_class(model, nn.Conv2d, ChannelsLastMaxPool2d)
    assert type(model[0]) is nn.Conv2d


@pytest.mark.solo  # check_run_cfg knows Lightning's Trainer keys
def test_on_for_contiguous_models_unless_turned_off_and_other_values_refused() -> None:
    def cfg(**performance):
        return OmegaConf.create({"performance": performance})

    def decide(cfg) -> bool:
        return performance_settings(cfg.performance, "cpu").channels_last_max_pool

    assert decide(cfg(disable_channel_last=True)) is True
    assert decide(cfg(disable_channel_last=False)) is False
    off = cfg(disable_channel_last=True, channels_last_max_pool="false")
    assert decide(off) is False
    assert check_run_cfg(off).performance.channels_last_max_pool is False
    with pytest.raises(ConfigError) as err:
        check_run_cfg(cfg(channels_last_max_pool="fast"))
    assert str(err.value) == (
        "performance.channels_last_max_pool='fast' is not a boolean; allowed: true, false (or 1, 0)"
    )
    with pytest.raises(ConfigError, match="is not a boolean"):  # even where it would not apply
        decide(cfg(disable_channel_last=False, channels_last_max_pool=2))


def test_pretraining_lays_a_contiguous_model_out_with_it_unless_turned_off() -> None:
    pytest.importorskip("solo", reason="needs upstream solo-learn installed")
    torchvision = pytest.importorskip("torchvision")
    from solo_bayesncl.training.fit import seed_and_layout

    def pool_type(**performance):
        layout = performance_settings(performance, "cpu")
        return type(seed_and_layout(3, layout, lambda: torchvision.models.resnet18()).maxpool)

    assert pool_type(disable_channel_last=True) is ChannelsLastMaxPool2d
    assert pool_type(disable_channel_last=True, channels_last_max_pool=False) is nn.MaxPool2d
    assert pool_type(disable_channel_last=False) is nn.MaxPool2d


def test_bayesncl_trains_the_same_to_the_last_bit_with_it(image_folder) -> None:
    """BayesNCL from its shipped config at 32 px (the ImageNet stem and its pooling), laid out as
    pretraining lays it out on the CPU, three LARS steps on one batch of real images each way."""
    pytest.importorskip("solo", reason="needs upstream solo-learn installed")
    batch = helpers.real_image_batch(image_folder)

    def train(channels_last_max_pool: bool):
        extra = [f"++performance.channels_last_max_pool={channels_last_max_pool}"]
        cfg = helpers.small_bayesncl_cfg(image_folder, extra)
        losses, first_grads, model = helpers.few_training_steps(cfg, batch)
        assert (type(model.backbone.maxpool) is ChannelsLastMaxPool2d) is channels_last_max_pool
        return losses, first_grads, model

    plain_losses, plain_grads, plain = train(False)
    losses, grads, model = train(True)
    assert losses == plain_losses and losses[0] != losses[-1]
    assert grads.keys() == plain_grads.keys()
    assert all(torch.equal(grads[name], plain_grads[name]) for name in grads)
    for (name, p), q in zip(plain.state_dict().items(), model.state_dict().values(), strict=True):
        assert torch.equal(p, q), name


@pytest.mark.slow
def test_a_compiled_training_forward_pools_as_the_eager_one() -> None:
    """``performance.compile`` traces the model: the compiler writes its own pooling (the
    channels-last route is not traceable), with the eager numbers."""
    from solo_bayesncl.training.compiled import compile_training_forward

    def net() -> nn.Module:
        torch.manual_seed(0)
        return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(3, 2, 1))

    models = {"eager": net(), "compiled": net()}
    max_pools_via_channels_last(models["compiled"])
    compile_training_forward(models["compiled"])
    x = torch.randn(4, 3, 16, 16)
    outputs = {name: model(x) for name, model in models.items()}
    torch.testing.assert_close(outputs["compiled"], outputs["eager"], rtol=1e-5, atol=1e-6)
    grads = {}
    for name, model in models.items():
        outputs[name].square().sum().backward()
        grads[name] = {k: p.grad for k, p in model.named_parameters()}
    helpers.assert_gradients_close(grads["eager"], grads["compiled"], rel=1e-4)
