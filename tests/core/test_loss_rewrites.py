"""The fast path against the definitions: the hand-written autograd functions of
``core/fused_losses.py``, as the loss modules and the gate run them, against the plain PyTorch
expressions of ``core/losses.py`` and ``core/gates.py`` on the same tensors: InfoNCE (two matrix
products per step), the gated normalisation, the straight-through threshold and the KL.

The values are compared bit for bit where the fast path claims it (the loss, ``u``, ``v``, the
threshold), the KL to float rounding (its definition is written as the paper writes it), and the
gradients to 2e-8 at the benchmark's scale (512 rows), where they are of order 1e-3.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from solo_bayesncl.core import fused_losses
from solo_bayesncl.core.gates import (
    GateOutput,
    bernoulli_kl,
    gate_probabilities,
    hard_threshold_ste,
)
from solo_bayesncl.core.losses import (
    BayesNCLLoss,
    NCLLoss,
    gated_representation,
    info_nce_loss,
    non_negative_representation,
)

GRAD_ATOL = 2e-8


def _fast_info_nce(v: torch.Tensor, indexes: torch.Tensor, temperature: float) -> torch.Tensor:
    """InfoNCE as the loss modules compute it (``fused_losses.info_nce``)."""
    return NCLLoss(temperature, check_inputs=False).contrast(v, indexes)


def _fast_gated(z: torch.Tensor, logits: torch.Tensor, non_neg: str) -> torch.Tensor:
    """Gate and ``v`` as BayesNCLLoss computes them (fused threshold and normalisation)."""
    criterion = BayesNCLLoss(non_neg=non_neg)
    return criterion.gated(z, criterion.gate(logits))


def _plain_gated(z: torch.Tensor, logits: torch.Tensor, non_neg: str) -> torch.Tensor:
    """Gate and ``v`` by the definitions."""
    return gated_representation(z, hard_threshold_ste(gate_probabilities(logits), 0.5), non_neg)


def _features(rows: int, dim: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(rows, dim, generator=g), 2.0 * torch.randn(rows, dim, generator=g)


# ---------------------------------------------------------------- InfoNCE


@pytest.mark.parametrize(
    ("n_images", "n_views", "dim", "temperature"),
    [(256, 2, 256, 0.2), (64, 3, 128, 0.05), (32, 4, 64, 1.0), (16, 2, 2048, 0.2)],
)
def test_info_nce_equals_the_definition(n_images, n_views, dim, temperature) -> None:
    z, _ = _features(n_views * n_images, dim, seed=n_images)
    v = F.normalize(z, dim=-1)
    indexes = torch.arange(n_images).repeat(n_views)
    new, old = v.clone().requires_grad_(True), v.clone().requires_grad_(True)
    loss_new = _fast_info_nce(new, indexes, temperature)
    loss_old = info_nce_loss(old, indexes, temperature, check_inputs=False)
    assert torch.equal(loss_new, loss_old)  # bit for bit
    loss_new.backward()
    loss_old.backward()
    scale = old.grad.abs().max().item()
    torch.testing.assert_close(new.grad, old.grad, rtol=0, atol=max(GRAD_ATOL, 1e-6 * scale))


def test_info_nce_gradient_within_2e_8_at_the_benchmark_scale() -> None:
    z, _ = _features(512, 256, seed=1)
    v = F.normalize(z, dim=-1)
    indexes = torch.arange(256).repeat(2)
    new, old = v.clone().requires_grad_(True), v.clone().requires_grad_(True)
    _fast_info_nce(new, indexes, 0.2).backward()
    info_nce_loss(old, indexes, 0.2, check_inputs=False).backward()
    assert old.grad.abs().max() > 1e-4  # a scale at which 2e-8 is a real bound
    torch.testing.assert_close(new.grad, old.grad, rtol=0, atol=GRAD_ATOL)


def test_info_nce_row_without_positive_unchecked_as_the_definition() -> None:
    """Without the input check a row with no positive gives the float32 maximum, as the
    definition does, and its numerator passes no gradient (autograd's masked_fill zeroes it)."""
    z, _ = _features(7, 16, seed=4)
    v = F.normalize(z, dim=-1)
    indexes = torch.tensor([0, 0, 1, 1, 2, 2, 3])  # the last row is alone
    new, old = v.clone().requires_grad_(True), v.clone().requires_grad_(True)
    loss_new = _fast_info_nce(new, indexes, 0.2)
    loss_old = info_nce_loss(old, indexes, 0.2, check_inputs=False)
    assert torch.equal(loss_new, loss_old)
    loss_new.backward()
    loss_old.backward()
    assert torch.isfinite(new.grad).all()
    torch.testing.assert_close(new.grad, old.grad, rtol=1e-6, atol=1e-7)


def test_info_nce_backward_takes_one_matrix_product() -> None:
    """Forward ``v v^T`` and backward ``(G + G^T) v``: two ``(n, n, d)`` products, where
    autograd's graph of the definition (and solo-learn's loss) takes three."""
    n, d = 64, 32
    indexes = torch.arange(n // 2).repeat(2)
    flops = {}
    for name, loss in (("fast", _fast_info_nce), ("definition", info_nce_loss)):
        v = F.normalize(torch.randn(n, d), dim=-1).requires_grad_(True)
        with FlopCounterMode(display=False) as counter:
            loss(v, indexes, 0.2).backward()
        flops[name] = counter.get_total_flops()
    assert flops == {"fast": 2 * (2 * n * n * d), "definition": 3 * (2 * n * n * d)}


# ---------------------------------------------------------------- representations


@pytest.mark.parametrize("non_neg", ["rep_relu", "relu", "softplus"])
def test_gated_representation_equals_the_definition(non_neg: str) -> None:
    z, logits = _features(512, 256, seed=2)
    z[3] = -1.0  # phi(z) = 0 for relu: a zero row
    logits[5] = -9.0  # every gate closed: a zero v
    upstream = torch.randn(512, 256, generator=torch.Generator().manual_seed(3))
    results = []
    for gated in (_fast_gated, _plain_gated):
        zr, lr = z.clone().requires_grad_(True), logits.clone().requires_grad_(True)
        v = gated(zr, lr, non_neg)
        v.backward(upstream)
        results.append((v.detach(), zr.grad, lr.grad))
    (v_new, dz_new, dl_new), (v_old, dz_old, dl_old) = results
    assert torch.equal(v_new, v_old)
    torch.testing.assert_close(dz_new, dz_old, rtol=1e-6, atol=GRAD_ATOL)
    torch.testing.assert_close(dl_new, dl_old, rtol=1e-6, atol=GRAD_ATOL)
    assert not v_new[5].any() and not dz_new[5].any() and not dl_new[5].any()  # gates closed
    if non_neg != "softplus":  # phi(z) = 0: a zero row, with zero gradient
        assert not v_new[3].any() and not dz_new[3].any()


@pytest.mark.parametrize(("non_neg", "top_k"), [("rep_relu", None), ("exp", 5), ("relu", 8)])
def test_non_negative_representation_equals_the_definition(non_neg: str, top_k) -> None:
    z, _ = _features(64, 32, seed=7)
    z[2] = -1.0  # a zero row for relu and rep_relu
    upstream = torch.randn(64, 32, generator=torch.Generator().manual_seed(8))
    fast = NCLLoss(non_neg=non_neg, top_k=top_k).representation
    results = []
    for rep in (fast, lambda z: non_negative_representation(z, non_neg, top_k)):
        zr = z.clone().requires_grad_(True)
        u = rep(zr)
        u.backward(upstream)
        results.append((u.detach(), zr.grad))
    (u_new, dz_new), (u_old, dz_old) = results
    assert torch.equal(u_new, u_old)
    scale = dz_old.abs().max().item()  # order 1: float32 rounding of the projection
    torch.testing.assert_close(dz_new, dz_old, rtol=0, atol=1e-6 * scale)


def test_gated_representation_broadcast_mask_and_detached_inputs() -> None:
    z, _ = _features(6, 8, seed=5)
    column = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0])  # one mask for every row
    broadcast = GateOutput(mask=column, probs=column)
    assert torch.equal(
        BayesNCLLoss(non_neg="relu").gated(z, broadcast), gated_representation(z, column, "relu")
    )
    logits = torch.randn(6, 8, requires_grad=True)
    v = _fast_gated(z, logits, "relu")  # z needs no gradient
    v.sum().backward()
    assert logits.grad is not None and torch.isfinite(logits.grad).all()


# ---------------------------------------------------------------- straight-through threshold


def _around(threshold: float, dtype: torch.dtype) -> torch.Tensor:
    """Probabilities on a grid over [0, 1] plus the threshold and its float neighbours."""
    t = torch.tensor(threshold, dtype=dtype)
    near = [t, torch.nextafter(t, torch.tensor(0.0, dtype=dtype))]
    near.append(torch.nextafter(t, torch.tensor(1.0, dtype=dtype)))
    grid = torch.linspace(0, 1, 2001, dtype=dtype)
    return torch.cat([grid, torch.stack(near), torch.tensor([0.0, 1.0, math.nan], dtype=dtype)])


@pytest.mark.parametrize("threshold", [0.5, 0.4, 0.3, 0.01, 0.999, 1e-8])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_straight_through_value_is_the_definitions(threshold: float, dtype) -> None:
    """The definition is the official ``m + p - sg(p)``."""
    probs = _around(threshold, dtype)
    new = fused_losses.hard_threshold_ste(probs, threshold)
    old = hard_threshold_ste(probs, threshold)
    assert new.dtype == dtype
    assert torch.equal(new[:-1], old[:-1])  # 0 or 1 exactly, as the comparison says
    assert math.isnan(new[-1].item()) and math.isnan(old[-1].item())  # NaN stays visible
    assert not torch.signbit(new[:-1]).any()  # zeros are +0, as in m + p - sg(p)


def test_straight_through_gradient_is_the_identity() -> None:
    upstream = torch.randn(32, 16)
    for ste in (fused_losses.hard_threshold_ste, hard_threshold_ste):
        probs = torch.rand(32, 16).requires_grad_(True)
        (ste(probs, 0.5) * upstream).sum().backward()
        assert torch.equal(probs.grad, upstream)


# ---------------------------------------------------------------- KL


@pytest.mark.parametrize("prior", [0.8, 0.3, 0.004])
def test_kl_equals_the_definition(prior: float) -> None:
    """Value to float rounding (the definition sums ``alpha (log alpha - log rho)`` and
    ``(1 - alpha) (...)``, the fast path ``c + alpha d``), gradient to 2e-8 off the clamp's
    bounds (see the next test for them)."""
    _, logits = _features(512, 256, seed=6)
    probs = torch.sigmoid(logits)
    probs[0, :2] = torch.tensor([0.0, 1.0])  # clamped
    new, old = probs.clone().requires_grad_(True), probs.clone().requires_grad_(True)
    kl_new = BayesNCLLoss(prior=prior).kl(new)
    kl_old = bernoulli_kl(old, prior)
    torch.testing.assert_close(kl_new, kl_old, rtol=2e-6, atol=0)
    kl_new.backward()
    kl_old.backward()
    assert old.grad.abs().max() > 1e-3
    torch.testing.assert_close(new.grad, old.grad, rtol=0, atol=GRAD_ATOL)


def test_kl_fast_gradient_is_zero_on_the_clamp_boundary_and_nan_stays_nan() -> None:
    """The fast path's clamp passes gradient strictly inside (eps, 1 - eps): alpha exactly eps
    or 1 - eps (in float32) gets none, the next float inside does; a NaN probability gets NaN.
    (Autograd's clamp in the definition passes it on the bounds too, and zero for NaN.)"""
    eps = torch.tensor(0.01)
    high = torch.tensor(0.99)
    probs = torch.stack(
        [
            eps,
            torch.nextafter(eps, torch.tensor(1.0)),
            high,
            torch.nextafter(high, torch.tensor(0.0)),
            torch.tensor(0.5),
            torch.tensor(math.nan),
        ]
    )[None].requires_grad_(True)
    BayesNCLLoss(prior=0.8, check_inputs=False).kl(probs).backward()
    grad = probs.grad[0]
    assert grad[0] == 0 and grad[2] == 0
    assert grad[1] != 0 and grad[3] != 0 and grad[4] != 0
    assert math.isnan(grad[5].item())
