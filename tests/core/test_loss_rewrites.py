"""The loss's hand-written passes against the autograd expressions they replace, on the same
tensors: InfoNCE as one autograd function (two matrix products per step), the gated
normalisation as one function, the straight-through threshold and the KL in fewer passes.

Each reference below is the expression the code evaluated before (the official BayesNCL
formulas, arXiv 2605.28441, section 3), written with plain autograd operations. The values are
compared bit for bit where the code claims it (the loss, ``v``, the KL) and the gradients to
2e-8 at the benchmark's scale (512 rows), where they are of order 1e-3.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from solo_bayesncl.core.gates import BernoulliGate, bernoulli_kl, hard_threshold_ste
from solo_bayesncl.core.losses import gated_representation, info_nce_loss
from solo_bayesncl.core.nonneg import non_negative

GRAD_ATOL = 2e-8


def _autograd_info_nce(v: torch.Tensor, indexes: torch.Tensor, temperature: float) -> torch.Tensor:
    """InfoNCE as autograd's graph of log-sum-exps over masked logits (three matrix products)."""
    logits = v @ v.T / temperature
    self_mask = torch.eye(len(v), dtype=torch.bool)
    pos_mask = (indexes[:, None] == indexes[None, :]) & ~self_mask
    lowest = torch.finfo(logits.dtype).min
    log_den = torch.logsumexp(logits.masked_fill(self_mask, lowest), dim=1)
    log_num = torch.logsumexp(logits.masked_fill(~pos_mask, lowest), dim=1)
    return (log_den - log_num).mean()


def _autograd_normalize(x: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    """``x / max(||x||, eps)`` with zero rows set to zero."""
    norm = torch.linalg.vector_norm(x, dim=-1, keepdim=True)
    return (x / norm.clamp_min(eps)).masked_fill(norm == 0, 0.0)


def _autograd_gated(z: torch.Tensor, mask: torch.Tensor, non_neg: str) -> torch.Tensor:
    """``normalize(normalize(phi(z)) * m)`` as three autograd steps."""
    return _autograd_normalize(_autograd_normalize(non_negative(z.float(), non_neg)) * mask)


def _autograd_ste(probs: torch.Tensor, threshold: float) -> torch.Tensor:
    """The official straight-through gate ``m + p - sg(p)``."""
    return (probs > threshold).to(probs.dtype) + (probs - probs.detach())


def _autograd_kl(probs: torch.Tensor, prior: float, eps: float = 0.01) -> torch.Tensor:
    """The KL's value as the previous forward computed it (gradient: see the clamp tests)."""
    alpha = probs.float().clamp(eps, 1.0 - eps)
    rho = min(max(prior, eps), 1.0 - eps)
    closed = torch.log(1.0 - alpha).sub_(math.log1p(-rho))
    logit_diff = torch.log(alpha).sub_(math.log(rho)).sub_(closed)
    return torch.addcmul(closed, alpha, logit_diff).sum(dim=-1).mean()


def _features(rows: int, dim: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(rows, dim, generator=g), 2.0 * torch.randn(rows, dim, generator=g)


# ---------------------------------------------------------------- InfoNCE


@pytest.mark.parametrize(
    ("n_images", "n_views", "dim", "temperature"),
    [(256, 2, 256, 0.2), (64, 3, 128, 0.05), (32, 4, 64, 1.0), (16, 2, 2048, 0.2)],
)
def test_info_nce_equals_the_autograd_expression(n_images, n_views, dim, temperature) -> None:
    z, _ = _features(n_views * n_images, dim, seed=n_images)
    v = F.normalize(z, dim=-1)
    indexes = torch.arange(n_images).repeat(n_views)
    new, old = v.clone().requires_grad_(True), v.clone().requires_grad_(True)
    loss_new = info_nce_loss(new, indexes, temperature, check_inputs=False)
    loss_old = _autograd_info_nce(old, indexes, temperature)
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
    info_nce_loss(new, indexes, 0.2, check_inputs=False).backward()
    _autograd_info_nce(old, indexes, 0.2).backward()
    assert old.grad.abs().max() > 1e-4  # a scale at which 2e-8 is a real bound
    torch.testing.assert_close(new.grad, old.grad, rtol=0, atol=GRAD_ATOL)


def test_info_nce_row_without_positive_unchecked_as_autograd() -> None:
    """Without the input check a row with no positive gives the float32 maximum, as before, and
    its numerator passes no gradient (autograd's masked_fill zeroes it)."""
    z, _ = _features(7, 16, seed=4)
    v = F.normalize(z, dim=-1)
    indexes = torch.tensor([0, 0, 1, 1, 2, 2, 3])  # the last row is alone
    new, old = v.clone().requires_grad_(True), v.clone().requires_grad_(True)
    loss_new = info_nce_loss(new, indexes, 0.2, check_inputs=False)
    loss_old = _autograd_info_nce(old, indexes, 0.2)
    assert torch.equal(loss_new, loss_old)
    loss_new.backward()
    loss_old.backward()
    assert torch.isfinite(new.grad).all()
    torch.testing.assert_close(new.grad, old.grad, rtol=1e-6, atol=1e-7)


def test_info_nce_backward_takes_one_matrix_product() -> None:
    """Forward ``v v^T`` and backward ``(G + G^T) v``: two ``(n, n, d)`` products, where
    autograd's graph (and solo-learn's loss) takes three."""
    n, d = 64, 32
    v = F.normalize(torch.randn(n, d), dim=-1).requires_grad_(True)
    indexes = torch.arange(n // 2).repeat(2)
    with FlopCounterMode(display=False) as counter:
        info_nce_loss(v, indexes, 0.2, check_inputs=False).backward()
    assert counter.get_total_flops() == 2 * (2 * n * n * d)


# ---------------------------------------------------------------- gated representation


@pytest.mark.parametrize("non_neg", ["rep_relu", "relu", "softplus"])
def test_gated_representation_equals_three_autograd_steps(non_neg: str) -> None:
    z, logits = _features(512, 256, seed=2)
    z[3] = -1.0  # phi(z) = 0 for relu: a zero row
    logits[5] = -9.0  # every gate closed: a zero v
    upstream = torch.randn(512, 256, generator=torch.Generator().manual_seed(3))
    results = []
    for gated in (gated_representation, _autograd_gated):
        zr, lr = z.clone().requires_grad_(True), logits.clone().requires_grad_(True)
        v = gated(zr, BernoulliGate()(lr).mask, non_neg)
        v.backward(upstream)
        results.append((v.detach(), zr.grad, lr.grad))
    (v_new, dz_new, dl_new), (v_old, dz_old, dl_old) = results
    assert torch.equal(v_new, v_old)
    torch.testing.assert_close(dz_new, dz_old, rtol=1e-6, atol=GRAD_ATOL)
    torch.testing.assert_close(dl_new, dl_old, rtol=1e-6, atol=GRAD_ATOL)
    assert not v_new[5].any() and not dz_new[5].any() and not dl_new[5].any()  # gates closed
    if non_neg != "softplus":  # phi(z) = 0: a zero row, with zero gradient
        assert not v_new[3].any() and not dz_new[3].any()


def test_gated_representation_broadcast_mask_and_detached_inputs() -> None:
    z, _ = _features(6, 8, seed=5)
    column = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0])  # one mask for every row
    torch.testing.assert_close(
        gated_representation(z, column, "relu"), _autograd_gated(z, column, "relu")
    )
    logits = torch.randn(6, 8, requires_grad=True)
    v = gated_representation(z, BernoulliGate()(logits).mask, "relu")  # z needs no gradient
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
def test_straight_through_value_is_the_official_one(threshold: float, dtype) -> None:
    probs = _around(threshold, dtype)
    new, old = hard_threshold_ste(probs, threshold), _autograd_ste(probs, threshold)
    assert new.dtype == dtype
    assert torch.equal(new[:-1], old[:-1])  # 0 or 1 exactly, as the comparison says
    assert math.isnan(new[-1].item()) and math.isnan(old[-1].item())  # NaN stays visible
    assert not torch.signbit(new[:-1]).any()  # zeros are +0, as in m + p - sg(p)


def test_straight_through_gradient_is_the_identity() -> None:
    probs = torch.rand(32, 16).requires_grad_(True)
    upstream = torch.randn(32, 16)
    (hard_threshold_ste(probs, 0.5) * upstream).sum().backward()
    assert torch.equal(probs.grad, upstream)


# ---------------------------------------------------------------- KL


@pytest.mark.parametrize("prior", [0.8, 0.3, 0.004])
def test_kl_value_equals_the_previous_forward(prior: float) -> None:
    _, logits = _features(512, 256, seed=6)
    probs = torch.sigmoid(logits)
    probs[0, :4] = torch.tensor([0.0, 0.01, 0.99, 1.0])  # clamped and boundary values
    assert torch.equal(bernoulli_kl(probs, prior), _autograd_kl(probs, prior))


def test_kl_gradient_is_zero_on_the_clamp_boundary_and_nan_stays_nan() -> None:
    """The clamp passes gradient strictly inside (eps, 1 - eps): alpha exactly eps or 1 - eps
    (in float32) gets none, the next float inside does; a NaN probability gets NaN."""
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
    bernoulli_kl(probs, prior=0.8, check_inputs=False).backward()
    grad = probs.grad[0]
    assert grad[0] == 0 and grad[2] == 0
    assert grad[1] != 0 and grad[3] != 0 and grad[4] != 0
    assert math.isnan(grad[5].item())
