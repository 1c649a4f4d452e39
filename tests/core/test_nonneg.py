"""Non-negativity maps: values against scalar formulas, rep_relu's gradient, config errors."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from solo_bayesncl.core.nonneg import NON_NEGATIVITY_MAPS, non_negative, rep_relu, resolve_non_neg


class NonNegativity(nn.Module):
    """``phi`` as a module: ``NonNegativity("rep_relu")(z)``."""

    def __init__(self, kind: str = "relu") -> None:
        super().__init__()
        self.kind = resolve_non_neg(kind)
        self._fn = NON_NEGATIVITY_MAPS[self.kind]

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self._fn(z)

    def extra_repr(self) -> str:
        return f"kind={self.kind!r}"


POINTS = [-30.0, -3.0, -1.0, -0.25, 0.0, 0.25, 1.0, 3.0, 30.0]


def _gelu(x: float) -> float:
    return 0.5 * x * (1.0 + math.erf(x / math.sqrt(2.0)))


# One scalar formula per map, written from the definitions, not from torch.
SCALAR = {
    "relu": lambda x: max(x, 0.0),
    "rep_relu": lambda x: max(x, 0.0),
    "gelu": _gelu,
    "softplus": lambda x: math.log1p(math.exp(x)) if x < 20 else x,
    "sigmoid": lambda x: 1.0 / (1.0 + math.exp(-x)),
    "exp": math.exp,
    "leaky_relu": lambda x: x if x >= 0 else 0.01 * x,
    "none": lambda x: x,
}
STRICTLY_NON_NEGATIVE = ("relu", "rep_relu", "softplus", "sigmoid", "exp")


def test_every_map_has_a_reference() -> None:
    assert set(SCALAR) == set(NON_NEGATIVITY_MAPS)


@pytest.mark.parametrize("kind", sorted(SCALAR))
def test_values_match_scalar_formulas(kind: str) -> None:
    z = torch.tensor(POINTS, dtype=torch.float64)
    expected = torch.tensor([SCALAR[kind](x) for x in POINTS], dtype=torch.float64)
    torch.testing.assert_close(non_negative(z, kind), expected, rtol=1e-6, atol=1e-12)
    torch.testing.assert_close(NonNegativity(kind)(z), expected, rtol=1e-6, atol=1e-12)


@pytest.mark.parametrize("kind", STRICTLY_NON_NEGATIVE)
def test_strict_maps_are_non_negative(kind: str) -> None:
    z = torch.randn(64, 32) * 10
    assert (non_negative(z, kind) >= 0).all()


def test_rep_relu_value_is_relu_exactly() -> None:
    z = torch.cat([torch.randn(1000) * 5, torch.tensor([0.0, -0.0, 1e-30, -1e-30, 1e4, -1e4])])
    assert torch.equal(rep_relu(z), F.relu(z))


def test_rep_relu_gradient_is_gelu_gradient() -> None:
    z = torch.cat([torch.randn(500) * 3, torch.tensor([0.0, -5.0, 5.0])])
    upstream = torch.randn_like(z)

    z_rep = z.clone().requires_grad_(True)
    rep_relu(z_rep).backward(upstream)
    z_gelu = z.clone().requires_grad_(True)
    F.gelu(z_gelu).backward(upstream)

    torch.testing.assert_close(z_rep.grad, z_gelu.grad, rtol=0, atol=0)
    # and it is not ReLU's gradient: negative inputs still get a (GELU) gradient
    assert z_rep.grad[z < -0.5].abs().max() > 0


def test_rep_relu_gradient_at_a_hand_point() -> None:
    # gelu'(x) = Phi(x) + x * phi(x); at x = -1: 0.158655 - 0.241971 = -0.083316
    z = torch.tensor([-1.0], dtype=torch.float64, requires_grad=True)
    rep_relu(z).sum().backward()
    assert z.grad.item() == pytest.approx(-0.0833155, abs=1e-6)


@pytest.mark.parametrize(
    ("spelling", "canonical"),
    [
        ("ReLU", "relu"),
        ("REP_RELU", "rep_relu"),
        ("leakyrelu", "leaky_relu"),
        ("null", "none"),
        ("identity", "none"),
        (None, "none"),
        ("softplus", "softplus"),
    ],
)
def test_resolve_non_neg_spellings(spelling: str | None, canonical: str) -> None:
    assert resolve_non_neg(spelling) == canonical


def test_resolve_non_neg_error_names_key_and_allowed_values() -> None:
    with pytest.raises(ValueError) as info:
        resolve_non_neg("foo")
    message = str(info.value)
    assert "non_neg" in message and "'foo'" in message
    for name in NON_NEGATIVITY_MAPS:
        assert name in message


def test_resolve_non_neg_error_uses_given_key() -> None:
    with pytest.raises(ValueError, match=r"method_kwargs\.non_neg='tanh'.*allowed values"):
        resolve_non_neg("tanh", key="method_kwargs.non_neg")


def test_module_rejects_unknown_map_and_reports_kind() -> None:
    with pytest.raises(ValueError, match="allowed values"):
        NonNegativity("abs")
    assert "kind='rep_relu'" in repr(NonNegativity("rep_relu"))
