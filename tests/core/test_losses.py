"""InfoNCE on (gated) non-negative features: values, gradients and numerical robustness, of the
definitions in ``core/losses.py`` and (the ``gated_step`` fixture) of ``BayesNCLLoss``, the
module that trains, which runs them.

The reference loss is solo-learn's SimCLR formula written as a plain Python loop over rows:
``mean_i -log( sum_{j in P(i)} e^{s_ij/T} / sum_{j != i} e^{s_ij/T} )``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from solo_bayesncl.core.gates import (
    BernoulliGate,
    bernoulli_kl,
    gate_probabilities,
    hard_threshold_ste,
)
from solo_bayesncl.core.losses import (
    gated_representation,
    info_nce_loss,
    keep_top_k,
    non_negative_representation,
    normalize_rows,
)
from solo_bayesncl.core.nonneg import NON_NEGATIVITY_MAPS
from solo_bayesncl.methods.keys import BayesNCLSettings, NCLSettings


def _settings(k: int = 16, **changes) -> dict:
    return {"proj_hidden_dim": 8, "proj_output_dim": k, **changes}


def _loop_loss(v: torch.Tensor, indexes: torch.Tensor, temperature: float) -> float:
    """The SimCLR/InfoNCE loss as a double loop over rows, in Python floats."""
    rows, ids = v.double().tolist(), indexes.tolist()
    total = 0.0
    for i, vi in enumerate(rows):
        numerator = denominator = 0.0
        for j, vj in enumerate(rows):
            if j == i:
                continue
            e = math.exp(sum(a * b for a, b in zip(vi, vj, strict=True)) / temperature)
            denominator += e
            if ids[j] == ids[i]:
                numerator += e
        total += -math.log(numerator / denominator)
    return total / len(rows)


def _naive_loss(v: torch.Tensor, indexes: torch.Tensor, temperature: float) -> torch.Tensor:
    """The same formula in float64 torch with exp-then-log, for reference gradients."""
    sim = torch.exp(v @ v.T / temperature)
    not_self = ~torch.eye(len(v), dtype=torch.bool)
    pos = (indexes[:, None] == indexes[None, :]) & not_self
    return -torch.log((sim * pos).sum(1) / (sim * not_self).sum(1)).mean()


def _views(n_images: int, n_views: int, dim: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(n_views * n_images, dim, generator=g)
    return F.normalize(z, dim=-1), torch.arange(n_images).repeat(n_views)


# ---------------------------------------------------------------- values


def test_hand_value_orthogonal_pairs() -> None:
    # rows e1, e1, e2, e2 at T = 1: every row has s = 1 with its positive and 0 with the two
    # negatives, so each row's loss is -log(e / (e + 2)) = log(1 + 2/e)
    v = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0]])
    loss = info_nce_loss(v, torch.tensor([0, 0, 1, 1]), temperature=1.0)
    assert loss.item() == pytest.approx(math.log(1 + 2 / math.e), rel=1e-6)


def test_hand_value_three_views() -> None:
    # three identical views of image 0 and three of image 1, orthogonal, T = 0.5:
    # each row has 2 positives at s/T = 2 and 3 negatives at 0: -log(2e^2 / (2e^2 + 3))
    v = torch.tensor([[1.0, 0.0]] * 3 + [[0.0, 1.0]] * 3)
    loss = info_nce_loss(v, torch.tensor([0, 0, 0, 1, 1, 1]), temperature=0.5)
    expected = -math.log(2 * math.e**2 / (2 * math.e**2 + 3))
    assert loss.item() == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("temperature", [0.05, 0.2, 1.0, 5.0])
@pytest.mark.parametrize("n_views", [2, 3])
def test_matches_loop_reference(n_views: int, temperature: float) -> None:
    v, idx = _views(n_images=5, n_views=n_views, dim=8)
    loss = info_nce_loss(v, idx, temperature=temperature)
    assert loss.dtype == torch.float32
    assert loss.item() == pytest.approx(_loop_loss(v, idx, temperature), rel=1e-5, abs=1e-6)


def test_positives_found_by_identifier_not_position() -> None:
    v, idx = _views(n_images=4, n_views=2, dim=6, seed=3)
    perm = torch.randperm(len(v), generator=torch.Generator().manual_seed(0))
    loss = info_nce_loss(v[perm], idx[perm], temperature=0.2)
    assert loss.item() == pytest.approx(_loop_loss(v, idx, 0.2), rel=1e-5)


@pytest.mark.parametrize("n_views", [2, 3])
def test_gradient_matches_naive_formula(n_views: int) -> None:
    v, idx = _views(n_images=4, n_views=n_views, dim=6, seed=1)
    v32 = v.clone().requires_grad_(True)
    info_nce_loss(v32, idx, temperature=0.2).backward()
    v64 = v.double().requires_grad_(True)
    _naive_loss(v64, idx, 0.2).backward()
    torch.testing.assert_close(v32.grad.double(), v64.grad, rtol=1e-4, atol=1e-6)


def test_non_negative_representation_is_unit_norm_of_phi() -> None:
    z = torch.randn(6, 10)
    u = non_negative_representation(z, "relu", None)
    expected = z.clamp_min(0) / z.clamp_min(0).norm(dim=-1, keepdim=True)
    torch.testing.assert_close(u, expected)


def test_gated_representation_zeroes_closed_gates_and_renormalises() -> None:
    z = torch.tensor([[1.0, 2.0, -1.0, 2.0]])
    mask = torch.tensor([[1.0, 0.0, 1.0, 1.0]])
    # relu -> [1, 2, 0, 2] / 3; gated -> [1, 0, 0, 2] / 3; renormalised -> [1, 0, 0, 2] / sqrt(5)
    expected = torch.tensor([[1.0, 0.0, 0.0, 2.0]]) / math.sqrt(5)
    torch.testing.assert_close(gated_representation(z, mask, "relu", None), expected)


# ---------------------------------------------------------------- keep_top_k


def test_keep_top_k_keeps_the_k_largest() -> None:
    z = torch.tensor([[0.1, 0.9, 0.5, 0.7, 0.3], [5.0, 4.0, 3.0, 2.0, 1.0]])
    expected = torch.tensor([[0.0, 0.9, 0.5, 0.7, 0.0], [5.0, 4.0, 3.0, 0.0, 0.0]])
    assert torch.equal(keep_top_k(z, 3), expected)


def test_keep_top_k_keeps_exactly_k_with_ties() -> None:
    z = torch.tensor([[1.0, 1.0, 1.0, 0.5, 0.2], [2.0, 0.0, 2.0, 2.0, 2.0]])
    kept = keep_top_k(z, 2)
    assert ((kept != 0).sum(dim=1) == 2).all()
    assert set(kept[0].unique().tolist()) == {0.0, 1.0}


def test_keep_top_k_random_rows_exactly_k() -> None:
    z = torch.randn(32, 64).relu() + torch.randint(0, 3, (32, 64)).float()  # many ties
    kept = keep_top_k(z, 10)
    assert ((kept != 0).sum(dim=1) == 10).all()
    # every kept value is >= every dropped value of its row
    dropped = z.masked_fill(kept != 0, -1.0)
    assert (kept.masked_fill(kept == 0, float("inf")).amin(1) >= dropped.amax(1)).all()


def test_keep_top_k_large_k_is_identity_and_gradient_only_to_kept() -> None:
    z = torch.rand(3, 6, requires_grad=True)
    assert keep_top_k(z, 6) is z and keep_top_k(z, 10) is z
    kept = keep_top_k(z, 2)
    kept.sum().backward()
    assert torch.equal(z.grad, (kept != 0).float())


# ---------------------------------------------------------------- a small training setup


class _Setup(nn.Module):
    """Backbone, projector and a gating head that reads the stop-gradient backbone features."""

    def __init__(self, dim_in: int = 10, dim_h: int = 12, k: int = 16) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.backbone = nn.Linear(dim_in, dim_h)
        self.projector = nn.Linear(dim_h, k)
        self.gating_head = nn.Linear(dim_h, k)
        self.gate = BernoulliGate("ste", 0.5, 1.0)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        h = self.backbone(x)
        return h, self.projector(h), self.gating_head(h.detach())


def _batch(n_images: int = 4, n_views: int = 2) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(5)
    return torch.randn(n_views * n_images, 10, generator=g), torch.arange(n_images).repeat(n_views)


def test_kl_gives_no_gradient_to_backbone_or_projector() -> None:
    model = _Setup()
    x, _ = _batch()
    _, _, logits = model(x)
    bernoulli_kl(model.gate(logits).probs, 0.8, 0.01).backward()
    for p in (*model.backbone.parameters(), *model.projector.parameters()):
        assert p.grad is None or not p.grad.any()
    assert model.gating_head.weight.grad.abs().sum() > 0


def test_full_loss_trains_gating_head_through_ste() -> None:
    model = _Setup()
    x, idx = _batch()
    lam, tau = 0.01, 1.0
    h, z, logits = model(x)
    out = model.gate(logits)
    loss = info_nce_loss(gated_representation(z, out.mask, "rep_relu", None), idx, 0.2)
    (loss + lam * bernoulli_kl(out.probs, 0.8, 0.01)).backward()

    # STE prediction: take the gradients of the loss w.r.t. the mask and the probabilities as
    # leaves, then d logits = (dL/dm + dL/dalpha) * alpha (1 - alpha) / tau.
    mask = out.mask.detach().requires_grad_(True)
    probs = out.probs.detach().requires_grad_(True)
    loss2 = info_nce_loss(gated_representation(z.detach(), mask, "rep_relu", None), idx, 0.2)
    (loss2 + lam * bernoulli_kl(probs, 0.8, 0.01)).backward()
    alpha = out.probs.detach()
    d_logits = (mask.grad + probs.grad) * alpha * (1 - alpha) / tau
    expected_weight_grad = d_logits.T @ h.detach()

    assert mask.grad.abs().sum() > 0  # the InfoNCE part reaches the gate
    torch.testing.assert_close(model.gating_head.weight.grad, expected_weight_grad)
    torch.testing.assert_close(model.gating_head.bias.grad, d_logits.sum(0))
    # and the backbone gets gradient only from InfoNCE through the projector
    assert model.backbone.weight.grad.abs().sum() > 0


def test_gating_head_gradient_does_not_reach_backbone() -> None:
    model = _Setup()
    x, idx = _batch()
    _, z, logits = model(x)
    out = model.gate(logits)
    # the projector output enters only detached: whatever the backbone gets here came via the gate
    loss = info_nce_loss(gated_representation(z.detach(), out.mask, "relu", None), idx, 0.2)
    loss.backward()
    assert model.gating_head.weight.grad.abs().sum() > 0
    assert model.backbone.weight.grad is None


# ---------------------------------------------------------------- robustness


def _assert_all_finite(*tensors: torch.Tensor | None) -> None:
    for t in tensors:
        assert t is not None and torch.isfinite(t).all()


GatedStep = Callable[..., tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]]


@pytest.fixture(params=["functions", "module"])
def gated_step(request) -> GatedStep:
    """Gate + gated representation + InfoNCE + 3e-5 KL, backward; returns the InfoNCE value,
    ``v`` and the gradients of ``z`` and of the gate logits. ``functions``: the definitions
    composed by hand; ``module``: ``BayesNCLLoss`` as training runs it (built from the paper's
    settings)."""

    def step(
        z: torch.Tensor,
        logits: torch.Tensor,
        idx: torch.Tensor,
        non_neg: str = "rep_relu",
        temperature: float = 0.2,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        z = z.detach().clone().requires_grad_(True)
        logits = logits.detach().clone().requires_grad_(True)
        if request.param == "module":
            changes = _settings(temperature=temperature, non_neg=non_neg)
            criterion = BayesNCLSettings.from_kwargs(changes).objective()
            terms = criterion.terms(z, logits, idx)
            terms.loss.backward()
            return terms.nce.detach(), terms.representation.detach(), z.grad, logits.grad
        probs = gate_probabilities(logits.float(), 1.0)
        v = gated_representation(z, hard_threshold_ste(probs, 0.5), non_neg, None)
        nce = info_nce_loss(v, idx, temperature)
        (nce + 3e-5 * bernoulli_kl(probs, 0.8, 0.01)).backward()
        return nce.detach(), v.detach(), z.grad, logits.grad

    return step


def test_all_gates_closed_for_one_sample(gated_step: GatedStep) -> None:
    g = torch.Generator().manual_seed(2)
    z, idx = torch.randn(8, 16, generator=g), torch.arange(4).repeat(2)
    logits = torch.randn(8, 16, generator=g)
    logits[[1, 5]] = -5.0  # both views of image 1: every gate closed
    logits[2] = -5.0  # one view of image 2
    loss, v, z_grad, logits_grad = gated_step(z, logits, idx)
    _assert_all_finite(loss, v, z_grad, logits_grad)
    assert not v[[1, 2, 5]].any()
    assert not z_grad[[1, 2, 5]].any()  # u * 0: nothing reaches z through closed gates
    assert loss.item() == pytest.approx(_loop_loss(v, idx, 0.2), rel=1e-5)


def test_a_closed_dimension_sends_no_gradient_to_z_and_an_open_one_does(
    gated_step: GatedStep,
) -> None:
    # u = normalize(phi(z)) couples every dimension, but the gradient of v = normalize(u * m) is
    # orthogonal to v, so the normalisation's share of a closed dimension's gradient is zero too
    g = torch.Generator().manual_seed(4)
    z, idx = torch.randn(8, 16, generator=g).abs() + 0.1, torch.arange(4).repeat(2)
    logits = torch.full((8, 16), 5.0)
    logits[:, ::3] = -5.0  # every third dimension closed on every image
    _, _, z_grad, _ = gated_step(z, logits, idx)
    closed = torch.zeros(16, dtype=torch.bool)
    closed[::3] = True
    torch.testing.assert_close(
        z_grad[:, closed], torch.zeros(8, int(closed.sum())), atol=1e-7, rtol=0
    )
    assert (z_grad[:, ~closed].abs() > 1e-5).float().mean() > 0.9


def test_all_gates_closed_gate_gets_only_the_kl_gradient(gated_step: GatedStep) -> None:
    """A sample with every gate closed has v = 0; its loss terms no longer depend on its gates.

    ``F.normalize`` would divide by ``max(||x||, 1e-12)`` and send 1e12 times the upstream
    gradient into those gates (1e9 to 1e10 here): finite in float32, inf in fp16.
    """
    g = torch.Generator().manual_seed(2)
    z, idx = torch.randn(8, 16, generator=g), torch.arange(4).repeat(2)
    logits = torch.randn(8, 16, generator=g)
    logits[[1, 5]] = -2.0
    _, _, _, logits_grad = gated_step(z, logits, idx)
    closed = logits[[1, 5]].detach().clone().requires_grad_(True)
    # only the KL term of these two rows (its mean is over all 8 rows) pulls on their gates
    (3e-5 * bernoulli_kl(torch.sigmoid(closed), 0.8, 0.01) * 2 / 8).backward()
    torch.testing.assert_close(logits_grad[[1, 5]], closed.grad)


def test_all_gates_closed_fp16_gradients_finite(gated_step: GatedStep) -> None:
    g = torch.Generator().manual_seed(9)
    z = torch.randn(8, 16, generator=g).half()
    logits = torch.randn(8, 16, generator=g).half()
    logits[3] = -4.0
    nce, v, z_grad, logits_grad = gated_step(z, logits, torch.arange(4).repeat(2))
    assert not v[3].any()
    _assert_all_finite(nce, z_grad, logits_grad)


def test_rep_relu_all_negative_row_has_bounded_gradient() -> None:
    """rep_relu(z) = 0 on an all-negative row but GELU's gradient is not zero there."""
    z = torch.randn(4, 8)
    z[1] = -torch.rand(8) - 0.5
    z.requires_grad_(True)
    u = non_negative_representation(z, "rep_relu", None)
    info_nce_loss(u, torch.arange(2).repeat(2), 0.2).backward()
    assert not u[1].any()
    assert not z.grad[1].any()


def test_every_gate_closed_everywhere(gated_step: GatedStep) -> None:
    z, idx = torch.randn(6, 8), torch.arange(3).repeat(2)
    loss, v, z_grad, logits_grad = gated_step(z, torch.full((6, 8), -3.0), idx)
    _assert_all_finite(loss, z_grad, logits_grad)
    assert not v.any()
    assert loss.item() == pytest.approx(math.log(5), rel=1e-6)  # all s = 0: -log(1 / 5)


def test_single_image_two_views(gated_step: GatedStep) -> None:
    v = F.normalize(torch.randn(2, 8), dim=-1).requires_grad_(True)
    loss = info_nce_loss(v, torch.tensor([7, 7]), temperature=0.2)
    loss.backward()
    assert loss.item() == 0.0  # the only other row is the positive
    _assert_all_finite(v.grad)
    loss, _, z_grad, logits_grad = gated_step(
        torch.randn(2, 8), torch.randn(2, 8), torch.tensor([0, 0])
    )
    _assert_all_finite(loss, z_grad, logits_grad)


@pytest.mark.parametrize("temperature", [0.05, 5.0])
def test_extreme_temperatures_finite(temperature: float, gated_step: GatedStep) -> None:
    z, idx = torch.randn(12, 16), torch.arange(4).repeat(3)
    loss, v, z_grad, logits_grad = gated_step(z, torch.randn(12, 16), idx, temperature=temperature)
    _assert_all_finite(loss, z_grad, logits_grad)
    assert loss.item() == pytest.approx(_loop_loss(v, idx, temperature), rel=1e-5)


@pytest.mark.parametrize("non_neg", sorted(NON_NEGATIVITY_MAPS))
def test_large_inputs_finite(non_neg: str, gated_step: GatedStep) -> None:
    g = torch.Generator().manual_seed(4)
    z = torch.randn(8, 16, generator=g) * 1e4
    logits = torch.randn(8, 16, generator=g) * 1e4
    loss, v, z_grad, logits_grad = gated_step(z, logits, torch.arange(4).repeat(2), non_neg)
    _assert_all_finite(loss, v, z_grad, logits_grad)


@pytest.mark.parametrize("scale", [1.0, 30.0, 100.0, 1e4])
def test_exp_representation_does_not_overflow(scale: float) -> None:
    """normalize(exp(z)) is a softmax-like ratio: finite and unit-norm for any finite z."""
    g = torch.Generator().manual_seed(6)
    z = (torch.randn(6, 8, generator=g) * scale).requires_grad_(True)
    u = non_negative_representation(z, "exp", None)
    # reference in float64 with the row maximum taken out by hand
    z64 = z.detach().double()
    e = torch.exp(z64 - z64.max(dim=1, keepdim=True).values)
    torch.testing.assert_close(u.double(), e / e.norm(dim=1, keepdim=True), rtol=1e-5, atol=1e-7)
    loss = info_nce_loss(u, torch.arange(3).repeat(2), 0.2)
    loss.backward()
    _assert_all_finite(loss, z.grad)


def test_exp_representation_gradient_unchanged_where_no_overflow() -> None:
    z = torch.randn(4, 5, dtype=torch.float64)
    za = z.clone().requires_grad_(True)
    (non_negative_representation(za, "exp", None) * torch.arange(5.0)).sum().backward()
    zb = z.clone().requires_grad_(True)
    (F.normalize(torch.exp(zb), dim=-1) * torch.arange(5.0)).sum().backward()
    torch.testing.assert_close(za.grad, zb.grad, rtol=1e-5, atol=1e-7)


def test_cpu_bf16_autocast() -> None:
    model = _Setup()
    x, idx = _batch(n_images=4, n_views=3)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        _, z, logits = model(x)
        assert z.dtype == torch.bfloat16  # the projector really ran in bf16
        out = model.gate(logits)
        v = gated_representation(z, out.mask, "rep_relu", None)
        nce = info_nce_loss(v, idx, 0.2)
        loss = nce + 3e-5 * bernoulli_kl(out.probs, 0.8, 0.01)
    assert nce.dtype == torch.float32 and loss.dtype == torch.float32
    # the loss itself ran in float32 with autocast off: same value as outside autocast
    assert nce.item() == pytest.approx(info_nce_loss(v.detach(), idx, 0.2).item(), rel=1e-6)
    assert nce.item() == pytest.approx(_loop_loss(v.detach(), idx, 0.2), rel=1e-5)
    loss.backward()
    _assert_all_finite(loss, *(p.grad for p in model.parameters()))


def test_fp16_inputs(gated_step: GatedStep) -> None:
    v, idx = _views(n_images=4, n_views=2, dim=8, seed=7)
    v16 = v.half().requires_grad_(True)
    loss = info_nce_loss(v16, idx, 0.2)
    loss.backward()
    assert loss.dtype == torch.float32 and v16.grad.dtype == torch.float16
    _assert_all_finite(loss, v16.grad)
    assert loss.item() == pytest.approx(_loop_loss(v16.detach().float(), idx, 0.2), rel=1e-5)
    g = torch.Generator().manual_seed(8)
    z16 = (torch.randn(8, 16, generator=g) * 100).half()
    out = gated_step(z16, (torch.randn(8, 16, generator=g) * 100).half(), idx)
    _assert_all_finite(*out)


# ---------------------------------------------------------------- refused inputs


@pytest.mark.parametrize("temperature", [0.0, -0.2, math.nan, math.inf])
def test_info_nce_refuses_temperature_that_is_not_positive_and_finite(temperature: float) -> None:
    v, idx = _views(4, 2, 8)
    with pytest.raises(
        ValueError, match=r"^temperature=.* is out of range; allowed: a number in \[0.0001, inf\)"
    ):
        info_nce_loss(v, idx, temperature=temperature, gather_distributed=False)


def test_info_nce_refuses_rows_without_positive() -> None:
    v, _ = _views(3, 2, 8)
    idx = torch.tensor([0, 0, 1, 1, 2, 3])  # the last two rows are single views
    with pytest.raises(ValueError, match=r"^indexes: 2 of 6 rows have no positive"):
        info_nce_loss(v, idx, 0.2, gather_distributed=False)


def test_info_nce_refuses_indexes_of_the_wrong_length() -> None:
    v, idx = _views(3, 2, 8)
    with pytest.raises(ValueError, match=r"^indexes must have shape \(6,\)"):
        info_nce_loss(v, idx[:5], 0.2, gather_distributed=False)


def test_info_nce_reports_non_finite_rows() -> None:
    v, idx = _views(4, 2, 8)
    v = v.clone()
    v[1, 0] = math.nan
    v[5, 3] = math.inf
    with pytest.raises(ValueError, match=r"^v: 2 of 8 rows hold NaN or Inf"):
        info_nce_loss(v, idx, 0.2, gather_distributed=False)
    unchecked = info_nce_loss(v, idx, 0.2, gather_distributed=False, check_inputs=False)
    assert math.isnan(float(unchecked))  # never a finite number from broken rows


@pytest.mark.parametrize("bad", [math.nan, math.inf])
@pytest.mark.parametrize("non_neg", ["relu", "rep_relu", "softplus", "exp", "none"])
def test_nan_and_inf_rows_stay_non_finite_through_the_representations(
    bad: float, non_neg: str
) -> None:
    z = torch.randn(4, 8)
    z[2, 5] = bad
    u = non_negative_representation(z, non_neg, None)
    assert torch.isfinite(u[[0, 1, 3]]).all()
    assert not torch.isfinite(u[2]).all()  # not turned into a zero row
    v = gated_representation(z, torch.ones(4, 8), non_neg, None)
    assert not torch.isfinite(v[2]).all()


def test_nan_z_gives_a_nan_loss_not_a_finite_one() -> None:
    z = torch.randn(8, 16, requires_grad=True)
    idx = torch.arange(4).repeat(2)
    broken = z.detach().clone()
    broken[3] = math.nan
    broken.requires_grad_(True)
    v = non_negative_representation(broken, "relu", None)
    loss = info_nce_loss(v, idx, 0.2, gather_distributed=False, check_inputs=False)
    assert math.isnan(float(loss))


def test_normalize_rows_gradient_matches_the_projection_formula() -> None:
    """grad of x / ||x|| is (g - y (y . g)) / ||x||; a zero row gets zero gradient, a row below
    the clamp ``eps`` gets g / eps (its norm is a constant there)."""
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(4, 6, generator=gen, dtype=torch.float64)
    x[1] = 0.0
    x[2] = 1e-14  # norm 2.4e-14 < eps = 1e-12
    g = torch.randn(4, 6, generator=gen, dtype=torch.float64)
    xr = x.clone().requires_grad_(True)
    normalize_rows(xr, 1e-12).backward(g)
    for i in (0, 3):
        norm = x[i].norm()
        y = x[i] / norm
        torch.testing.assert_close(xr.grad[i], (g[i] - y * (y @ g[i])) / norm)
    assert torch.equal(xr.grad[1], torch.zeros(6, dtype=torch.float64))
    torch.testing.assert_close(xr.grad[2], g[2] / 1e-12)


# ---------------------------------------------------------------- bf16 autocast


def _bf16_rows(n: int = 1024, d: int = 16, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows normalised by the package's own ``normalize_rows`` under bf16 autocast on the CPU
    (a bf16 projector's output), and their indexes (two views per image)."""
    torch.manual_seed(seed)
    projector = nn.Linear(d, d)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        v = normalize_rows(projector(torch.randn(n, d)))
    assert v.dtype == torch.bfloat16
    return v, torch.arange(n // 2).repeat(2)


def test_rows_normalised_under_bf16_autocast_are_accepted() -> None:
    """Rounding a unit row to bf16 moves its norm by up to a few of bf16's 2^-8 units (1.0035
    was seen): such rows are normalised at their precision and are accepted, while a row that
    was not normalised at all is still refused."""
    v, indexes = _bf16_rows()
    assert torch.linalg.vector_norm(v.float(), dim=1).max() > 1.001  # the rows of the report
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = info_nce_loss(v, indexes, 0.2, gather_distributed=False)
    assert torch.isfinite(loss) and loss.dtype == torch.float32
    exact = info_nce_loss(v.float(), indexes, 0.2, gather_distributed=False, check_inputs=False)
    assert loss.item() == exact.item()  # the check lets them through; the value is unchanged
    with pytest.raises(ValueError, match=r"^v: 1024 of 1024 rows have an L2 norm above 1"):
        info_nce_loss(v * 1.05, indexes, 0.2, gather_distributed=False)
    # float32 rows keep float32's tolerance
    with pytest.raises(ValueError, match=r"^v: 1024 of 1024 rows have an L2 norm above 1"):
        info_nce_loss(normalize_rows(v.float()) * 1.004, indexes, 0.2, gather_distributed=False)


@pytest.mark.parametrize("criterion", ["ncl", "bayesncl"])
def test_loss_modules_train_a_step_under_bf16_autocast(criterion: str) -> None:
    """The loss modules under bf16 autocast on the CPU, with a bf16 projector and gating head
    and the input checks on: forward and backward run and every value is finite."""
    torch.manual_seed(0)
    n, d, k = 256, 32, 64
    backbone, projector, head = nn.Linear(d, d), nn.Linear(d, k), nn.Linear(d, k)
    settings = NCLSettings if criterion == "ncl" else BayesNCLSettings
    loss_fn = settings.from_kwargs(_settings(k)).objective()
    indexes = torch.arange(n // 2).repeat(2)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        h = backbone(torch.randn(n, d))
        z = projector(h)
        assert z.dtype == torch.bfloat16
        loss = loss_fn(z, indexes) if criterion == "ncl" else loss_fn(z, head(h), indexes)
        # the representation it compared, handed to the plain definition, is accepted too
        v = normalize_rows(z)
        assert torch.isfinite(info_nce_loss(v, indexes, 0.2, gather_distributed=False))
    loss.backward()
    assert torch.isfinite(loss)
    params = [*backbone.parameters(), *projector.parameters()]
    if criterion == "bayesncl":
        params += list(head.parameters())
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in params)


def test_row_without_positive_unchecked_gives_a_finite_gradient() -> None:
    """Without the input check a row with no positive gives a loss near the float32 maximum
    (its numerator is empty: a warning sign, not a silent number), and the backward stays
    finite: the empty numerator passes no gradient (autograd's masked fill)."""
    v = F.normalize(torch.randn(7, 16, generator=torch.Generator().manual_seed(4)), dim=-1)
    v.requires_grad_(True)
    indexes = torch.tensor([0, 0, 1, 1, 2, 2, 3])  # the last row is alone
    loss = info_nce_loss(v, indexes, 0.2, gather_distributed=False, check_inputs=False)
    assert loss.item() > 1e37
    loss.backward()
    assert torch.isfinite(v.grad).all() and v.grad.abs().max() < 1e3


def test_a_mask_that_broadcasts_gates_every_row_alike() -> None:
    z = torch.randn(6, 8, generator=torch.Generator().manual_seed(5))
    column = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0])  # one mask for every row
    expected = gated_representation(z, column.expand(6, 8), "relu", None)
    assert torch.equal(gated_representation(z, column, "relu", None), expected)
    logits = torch.randn(6, 8, requires_grad=True)
    gate = BernoulliGate("ste", 0.5, 1.0)(logits)
    gated_representation(z, gate.mask, "relu", None).sum().backward()  # z needs no gradient
    assert logits.grad is not None and torch.isfinite(logits.grad).all()
