"""The Bernoulli gate, its straight-through gradient, the binary-concrete sample and the KL."""

from __future__ import annotations

import math

import pytest
import torch

from solo_bayesncl.core.gates import (
    GATE_TYPES,
    BernoulliGate,
    GateOutput,
    bernoulli_kl,
    binary_concrete_sample,
    gate_probabilities,
    gumbel_sample,
    hard_threshold_ste,
    resolve_gate_type,
)


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def _kl_reference(probs: list[list[float]], prior: float, eps: float = 0.01) -> float:
    """KL(Bernoulli(a) || Bernoulli(rho)) summed over dims, averaged over rows, a plain loop."""
    rho = min(max(prior, eps), 1 - eps)
    total = 0.0
    for row in probs:
        for a in row:
            a = min(max(a, eps), 1 - eps)
            total += a * math.log(a / rho) + (1 - a) * math.log((1 - a) / (1 - rho))
    return total / len(probs)


# ---------------------------------------------------------------- values


def test_gate_probabilities_against_scalar_sigmoid() -> None:
    logits = [-4.0, -1.0, 0.0, 0.5, 3.0]
    for tau in (0.5, 1.0, 2.0):
        got = gate_probabilities(torch.tensor(logits, dtype=torch.float64), tau)
        expected = torch.tensor([_sigmoid(x / tau) for x in logits], dtype=torch.float64)
        torch.testing.assert_close(got, expected)


def test_ste_gate_values_are_hard_and_threshold_is_strict() -> None:
    probs = torch.tensor([[0.1, 0.5, 0.50001, 0.9], [0.3, 0.7, 0.29, 0.31]])
    assert hard_threshold_ste(probs, 0.5).tolist() == [[0, 0, 1, 1], [0, 1, 0, 0]]
    assert hard_threshold_ste(probs, 0.3).tolist() == [[0, 1, 1, 1], [0, 1, 0, 1]]


def test_gate_module_mask_matches_hand_threshold() -> None:
    # tau = 2: alpha = sigmoid(a / 2); t = 0.7 opens where a / 2 > logit(0.7) = 0.8473
    logits = torch.tensor([[-3.0, 0.0, 1.6, 1.8, 10.0]])
    out = BernoulliGate("ste", 0.7, 2.0)(logits)
    assert out.mask.tolist() == [[0.0, 0.0, 0.0, 1.0, 1.0]]
    expected = [_sigmoid(a / 2) for a in logits[0].tolist()]
    torch.testing.assert_close(out.probs[0], torch.tensor(expected))
    assert out.open_ratio.item() == pytest.approx(0.4)


def test_soft_mode_returns_probabilities() -> None:
    logits = torch.randn(4, 6)
    out = BernoulliGate("ste", 0.5, 1.0)(logits, mode="soft")
    torch.testing.assert_close(out.mask, torch.sigmoid(logits))
    assert out.mask is out.probs


def test_half_precision_logits_give_float32_gates() -> None:
    logits = torch.randn(4, 6).half()
    out = BernoulliGate("ste", 0.5, 1.0)(logits)
    assert out.mask.dtype == torch.float32 and out.probs.dtype == torch.float32
    assert torch.equal(out.mask, (torch.sigmoid(logits.float()) > 0.5).float())


def _around(threshold: float, dtype: torch.dtype) -> torch.Tensor:
    """Probabilities on a grid over [0, 1] plus the threshold and its float neighbours."""
    t = torch.tensor(threshold, dtype=dtype)
    near = [t, torch.nextafter(t, torch.tensor(0.0, dtype=dtype))]
    near.append(torch.nextafter(t, torch.tensor(1.0, dtype=dtype)))
    grid = torch.linspace(0, 1, 2001, dtype=dtype)
    return torch.cat([grid, torch.stack(near), torch.tensor([0.0, 1.0, math.nan], dtype=dtype)])


@pytest.mark.parametrize("threshold", [0.5, 0.4, 0.3, 0.01, 0.999, 1e-8])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_straight_through_value_is_the_strict_comparison(threshold: float, dtype) -> None:
    """``m + p - sg(p)`` is exactly ``1[p > t]`` in ``p``'s dtype, at the threshold and its float
    neighbours too; +0 where closed; NaN stays NaN (a broken gate stays visible)."""
    probs = _around(threshold, dtype)
    mask = hard_threshold_ste(probs, threshold)
    assert mask.dtype == dtype
    assert torch.equal(mask[:-1], (probs[:-1] > threshold).to(dtype))
    assert math.isnan(mask[-1].item())
    assert not torch.signbit(mask[:-1]).any()


# ---------------------------------------------------------------- straight-through gradients


def test_hard_threshold_gradient_is_identity() -> None:
    probs = torch.rand(5, 7, requires_grad=True)
    upstream = torch.randn(5, 7)
    (hard_threshold_ste(probs, 0.5) * upstream).sum().backward()
    assert torch.equal(probs.grad, upstream)


@pytest.mark.parametrize("tau", [0.5, 1.0, 3.0])
def test_gate_passes_gradient_to_logits_as_ste_predicts(tau: float) -> None:
    # Logits within +-6: the gate computes in float32, whose sigmoid rounds to exactly 0 or 1
    # (and its gradient to 0) for logits beyond about 17 * tau; unbounded normal draws reached that
    # now and then. A fixed generator keeps the draw independent of the tests run before.
    generator = torch.Generator().manual_seed(0)
    logits = (torch.rand(6, 10, generator=generator, dtype=torch.float64) * 12 - 6).requires_grad_()
    upstream = torch.randn(6, 10, generator=generator)
    out = BernoulliGate("ste", 0.5, tau)(logits)
    (out.mask * upstream).sum().backward()
    # STE: d mask / d alpha = 1, d alpha / d a = alpha (1 - alpha) / tau
    alpha = torch.sigmoid(logits.detach().float() / tau)
    expected = upstream * alpha * (1 - alpha) / tau
    assert (out.mask == 0).any() and (out.mask == 1).any()
    assert logits.grad[out.mask == 0].abs().min() > 0  # closed gates get gradient too
    torch.testing.assert_close(logits.grad.float(), expected, rtol=1e-5, atol=1e-8)


def test_gumbel_gate_training_passes_gradient_to_logits() -> None:
    logits = torch.randn(4, 8, requires_grad=True)
    out = BernoulliGate("binary_concrete", 0.5, 1.0).train()(logits)
    out.mask.sum().backward()
    assert torch.isfinite(logits.grad).all() and logits.grad.abs().min() > 0


# ---------------------------------------------------------------- binary concrete


def test_gumbel_training_is_stochastic_and_hard() -> None:
    gate = BernoulliGate("binary_concrete", 0.5, 1.0).train()
    logits = torch.zeros(16, 64)
    torch.manual_seed(0)
    first = gate(logits).mask
    second = gate(logits).mask
    assert not torch.equal(first, second)
    assert set(first.unique().tolist()) <= {0.0, 1.0}


def test_gumbel_eval_is_deterministic_and_equals_ste_gate() -> None:
    logits = torch.randn(16, 64) * 3
    gate = BernoulliGate("binary_concrete", 0.6, 0.7).eval()
    ste = BernoulliGate("ste", 0.6, 0.7)
    first, second = gate(logits), gate(logits)
    assert torch.equal(first.mask, second.mask)
    assert torch.equal(first.mask, ste(logits).mask)
    assert torch.equal(first.probs, ste(logits).probs)


@pytest.mark.parametrize("tau", [1.0, 0.3])
def test_binary_concrete_open_rate_is_sigmoid_of_logit(tau: float) -> None:
    """P(sigmoid((a + L) / tau) > 0.5) = P(L > -a) = sigmoid(a) for logistic noise L.

    A single Gumbel sample instead of logistic noise would give 1 - exp(-exp(a)), e.g. 0.632 at
    a = 0 instead of 0.5, which this test rejects.
    """
    values = [-2.0, -0.5, 0.0, 1.0, 3.0]
    n = 100_000
    logits = torch.tensor(values).repeat_interleave(n)
    g = torch.Generator().manual_seed(1234)
    sample = binary_concrete_sample(logits, tau, generator=g)
    rates = (sample > 0.5).float().view(len(values), n).mean(dim=1)
    for a, rate in zip(values, rates.tolist(), strict=True):
        # standard error <= 0.0016 at n = 1e5; 0.008 is five of them
        assert rate == pytest.approx(_sigmoid(a), abs=0.008), a


def test_binary_concrete_sample_is_in_unit_interval_and_keeps_dtype() -> None:
    sample = binary_concrete_sample(torch.tensor([-1e4, 0.0, 1e4]).repeat(1000), 1.0)
    assert ((sample >= 0) & (sample <= 1)).all()
    half = binary_concrete_sample(torch.zeros(10, dtype=torch.float16), 1.0)
    assert half.dtype == torch.float16


# ---------------------------------------------------------------- KL


def test_kl_hand_value() -> None:
    # per dim: 0.5 ln(0.5 / 0.8) + 0.5 ln(0.5 / 0.2) = 0.5 ln(1.5625) = ln(1.25)
    probs = torch.full((2, 3), 0.5)
    assert bernoulli_kl(probs, 0.8, 0.01).item() == pytest.approx(3 * math.log(1.25), rel=1e-6)


def test_kl_is_zero_at_the_prior() -> None:
    assert bernoulli_kl(torch.full((4, 5), 0.8), 0.8, 0.01).item() == pytest.approx(0, abs=1e-7)


def test_kl_against_loop_with_clamping() -> None:
    probs = [[0.0, 0.005, 0.3, 0.8, 1.0], [0.999, 0.5, 0.01, 0.66, 0.12]]
    for prior in (0.8, 0.2, 0.004, 0.999):  # the last two are clamped to [eps, 1 - eps]
        got = bernoulli_kl(torch.tensor(probs), prior, 0.01).item()
        assert got == pytest.approx(_kl_reference(probs, prior), rel=1e-5), prior
    got = bernoulli_kl(torch.tensor(probs), 0.6, 0.1).item()
    assert got == pytest.approx(_kl_reference(probs, 0.6, eps=0.1), rel=1e-5)


def test_kl_random_against_loop() -> None:
    probs = torch.rand(7, 13, dtype=torch.float64)
    got = bernoulli_kl(probs, 0.8, 0.01).item()
    assert got == pytest.approx(_kl_reference(probs.tolist(), 0.8), rel=1e-5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_kl_computed_in_float32(dtype: torch.dtype) -> None:
    probs = torch.rand(8, 16).to(dtype)
    kl = bernoulli_kl(probs, 0.8, 0.01)
    assert kl.dtype == torch.float32
    assert kl.item() == pytest.approx(_kl_reference(probs.float().tolist(), 0.8), rel=1e-5)


def test_kl_gradient_finite_for_saturated_logits() -> None:
    logits = torch.tensor([[1e4, -1e4, 0.0, 30.0]], requires_grad=True)
    kl = bernoulli_kl(BernoulliGate("ste", 0.5, 1.0)(logits).probs, 0.8, 0.01)
    kl.backward()
    assert torch.isfinite(kl) and torch.isfinite(logits.grad).all()
    assert logits.grad[0, 2] != 0  # the unsaturated gate is pulled toward the prior
    assert logits.grad[0, 2] < 0  # alpha = 0.5 < rho: descent raises the logit


# ---------------------------------------------------------------- configuration


def test_unknown_gate_type_names_key_and_allowed_values() -> None:
    with pytest.raises(ValueError) as info:
        resolve_gate_type("foo")
    message = str(info.value)
    assert "gate_type='foo'" in message and "allowed values" in message
    for name in GATE_TYPES:
        assert name in message
    with pytest.raises(ValueError, match=r"method_kwargs\.gate_type='bar'"):
        resolve_gate_type("bar", key="method_kwargs.gate_type")
    with pytest.raises(ValueError, match="gate_type='foo'"):
        BernoulliGate("foo", 0.5, 1.0)


@pytest.mark.parametrize(
    ("spelling", "canonical"),
    [
        ("STE", "ste"),
        ("ste", "ste"),
        ("Gumbel_Sigmoid", "gumbel"),  # the official name: its single-Gumbel gate
        ("gumbel", "gumbel"),
        ("binary_concrete", "binary_concrete"),
    ],
)
def test_gate_type_spellings(spelling: str, canonical: str) -> None:
    assert resolve_gate_type(spelling) == canonical


def test_unknown_mode_names_allowed_values() -> None:
    with pytest.raises(ValueError, match=r"mode='medium'.*hard, soft"):
        BernoulliGate("ste", 0.5, 1.0)(torch.zeros(2, 3), mode="medium")


def test_gate_output_open_ratio() -> None:
    out = GateOutput(mask=torch.tensor([[1.0, 0.0], [1.0, 1.0]]), probs=torch.zeros(2, 2))
    assert out.open_ratio.item() == 0.75


# ---------------------------------------------------------------- the three gate variants


def _official_gumbel_gate(logits: torch.Tensor, u: torch.Tensor, tau: float, t: float):
    """The official BayesNCL ``gumbel_sigmoid`` hard gate, rewritten from its formula: one
    Gumbel sample -log(-log(u + 1e-4) + 1e-4) added to the logits, sigmoid, threshold."""
    g = -torch.log(-torch.log(u + 1e-4) + 1e-4)
    return (torch.sigmoid((logits + g) / tau) > t).float()


def test_gumbel_sample_equals_the_official_formula() -> None:
    logits = torch.randn(64, 32) * 2
    sample = gumbel_sample(logits, 0.7, generator=torch.Generator().manual_seed(3))
    u = torch.rand(logits.shape, generator=torch.Generator().manual_seed(3))
    expected = _official_gumbel_gate(logits, u, 0.7, 0.6)
    assert torch.equal((sample > 0.6).float(), expected)


@pytest.mark.parametrize(
    ("gate_type", "expected"),
    [
        ("ste", 0.0),  # alpha = 0.5 is not > t = 0.5: closed
        ("binary_concrete", 0.5),  # P(logistic > 0) = 1/2
        ("gumbel", 1.0 - math.exp(-1.0)),  # P(Gumbel > 0) = 1 - 1/e = 0.632
        ("gumbel_sigmoid", 1.0 - math.exp(-1.0)),  # the official name means the official gate
    ],
)
def test_open_rate_at_logit_zero_in_training(gate_type: str, expected: float) -> None:
    torch.manual_seed(0)
    out = BernoulliGate(gate_type, 0.5, 1.0).train()(torch.zeros(200, 1000))
    # 2e5 draws: standard error <= 0.0012; 0.006 is five of them
    assert out.open_ratio.item() == pytest.approx(expected, abs=0.006)


@pytest.mark.parametrize("a", [-2.0, -0.5, 1.0])
def test_gumbel_open_rate_is_one_minus_exp_minus_exp_logit(a: float) -> None:
    torch.manual_seed(1)
    out = BernoulliGate("gumbel", 0.5, 1.0).train()(torch.full((100, 1000), a))
    assert out.open_ratio.item() == pytest.approx(1 - math.exp(-math.exp(a)), abs=0.006)


@pytest.mark.parametrize("gate_type", ["binary_concrete", "gumbel"])
def test_noisy_gates_evaluate_like_ste(gate_type: str) -> None:
    logits = torch.randn(32, 64) * 3
    got = BernoulliGate(gate_type, 0.5, 1.0).eval()(logits).mask
    assert torch.equal(got, BernoulliGate("ste", 0.5, 1.0)(logits).mask)


def test_kl_of_nan_probabilities_is_nan() -> None:
    probs = torch.full((2, 3), 0.3)
    probs[1, 2] = math.nan
    assert math.isnan(float(bernoulli_kl(probs, 0.8, 0.01)))


def test_kl_gradient_is_the_closed_form_one_zero_where_clamped() -> None:
    """d KL / d alpha = log(a / (1 - a)) - log(rho / (1 - rho)), over the rows' mean, inside the
    clamp range; 0 where alpha is clamped (the clamp passes no gradient there)."""
    probs = torch.tensor([[0.001, 0.2, 0.5, 0.7], [0.9, 0.995, 0.3, 0.05]], dtype=torch.float64)
    probs.requires_grad_(True)
    bernoulli_kl(probs, 0.8, 0.01).backward()
    rho = 0.8
    for (row, col), alpha in zip(
        [(r, c) for r in range(2) for c in range(4)], probs.detach().flatten().tolist(), strict=True
    ):
        inside = 0.01 < alpha < 0.99
        expected = (math.log(alpha / (1 - alpha)) - math.log(rho / (1 - rho))) / 2 if inside else 0
        assert probs.grad[row, col].item() == pytest.approx(expected, rel=1e-5, abs=1e-7)


def test_kl_at_the_prior_is_never_negative() -> None:
    """``alpha == rho`` in float32: the exact KL is 0 (or a hair above, float32(rho) != rho), but
    the two log differences round apart and the sum came out as low as -2e-5. A KL is never
    negative: the definition clamps it at 0."""
    for prior in torch.linspace(0.011, 0.989, 300).tolist():
        probs = torch.full((8, 256), prior, dtype=torch.float32)
        assert bernoulli_kl(probs, prior, 0.01).item() >= 0.0, prior


def _unclamped_kl_at_prior(prior: float) -> float:
    """The definition's sum for ``alpha == rho`` in float32, before any clamp at 0."""
    a = torch.full((8, 256), prior)
    per_gate = a * (torch.log(a) - math.log(prior)) + (1 - a) * (
        torch.log(1 - a) - math.log1p(-prior)
    )
    return per_gate.sum(dim=-1).mean().item()


def test_a_clamped_kl_passes_no_gradient() -> None:
    """Where the rounding made the sum negative, the clamp at 0 holds it there: no gradient
    flows back (autograd's masked fill)."""
    priors = torch.linspace(0.011, 0.989, 300).tolist()
    prior = next(p for p in priors if _unclamped_kl_at_prior(p) < 0)
    alpha = torch.full((8, 256), prior, requires_grad=True)
    value = bernoulli_kl(alpha, prior, 0.01)
    value.backward()
    assert value.item() == 0.0
    assert alpha.grad is not None and torch.count_nonzero(alpha.grad) == 0
