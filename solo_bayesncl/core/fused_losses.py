"""The fast path of the objective: hand-written autograd functions for the terms that
:mod:`solo_bayesncl.core.losses` and :mod:`solo_bayesncl.core.gates` define in plain PyTorch.

Each function here computes the same operations as its definition, in the same order, so the
values are the definition's bit for bit (the KL's to rounding: the definition is written as the
paper writes it); the backward passes are written by hand, in fewer passes over the rows and
with fewer tensors to allocate, and agree with autograd's gradient of the definition to 2e-8 at
the benchmark's scale (tests/core/test_loss_rewrites.py). The loss modules
(:class:`~solo_bayesncl.core.losses.NCLLoss`, :class:`~solo_bayesncl.core.losses.BayesNCLLoss`)
and the gate (:class:`~solo_bayesncl.core.gates.BernoulliGate`) run on them:

- :func:`normalize_rows`: ``u = normalize(phi(z))``, defined by ``losses.normalize_rows``;
- :func:`gated_normalize`: ``v = normalize(u * m)``, by ``losses.gated_representation``;
- :func:`info_nce`: InfoNCE, by ``losses.info_nce_loss``;
- :func:`hard_threshold_ste`: ``m + alpha - sg(alpha)``, by ``gates.hard_threshold_ste``;
- :func:`bernoulli_kl`: ``KL(alpha || rho)``, by ``gates.bernoulli_kl``.

The functions take inputs their callers have already checked and prepared (float32 rows, the
gathered batch, a clamped prior).
"""

from __future__ import annotations

import math

import torch

__all__ = ["bernoulli_kl", "gated_normalize", "hard_threshold_ste", "info_nce", "normalize_rows"]


def normalize_rows(x: torch.Tensor, eps: float) -> torch.Tensor:
    """``losses.normalize_rows(x, eps)``: ``x / max(||x||, eps)`` with a zero row kept zero and
    given zero gradient, as one autograd function."""
    return _NormalizeRows.apply(x, float(eps))


def gated_normalize(p: torch.Tensor, mask: torch.Tensor, eps: float) -> torch.Tensor:
    """``normalize_rows(normalize_rows(p) * mask)`` for ``p = phi(z)`` in float32 and a float
    mask: one autograd function when the mask has the shape of ``p``, else (a mask that
    broadcasts) the two normalisations in a row."""
    if mask.shape != p.shape:
        return normalize_rows(normalize_rows(p, eps) * mask, eps)
    return _GatedNormalize.apply(p, mask, float(eps))


def info_nce(
    v: torch.Tensor,
    all_v: torch.Tensor,
    different: torch.Tensor,
    offset: int,
    temperature: float,
) -> torch.Tensor:
    """InfoNCE of the rows ``v`` (float32) against ``all_v`` (the gathered batch, ``v`` itself on
    one process): ``different[i, j]`` says row ``j`` of ``all_v`` is another image than row
    ``i``, whose own column is ``i + offset``. Call it with autocast disabled."""
    return _InfoNCE.apply(v, all_v, different, offset, float(temperature))


def hard_threshold_ste(probs: torch.Tensor, threshold: float) -> torch.Tensor:
    """``gates.hard_threshold_ste``: ``1[probs > t]`` forward, the identity backward."""
    return _StraightThroughThreshold.apply(probs, float(threshold))


def bernoulli_kl(probs: torch.Tensor, rho: float, eps: float) -> torch.Tensor:
    """``gates.bernoulli_kl`` for a prior ``rho`` already clamped to ``[eps, 1 - eps]``. Unlike
    the definition's clamp, the gradient is zero on the clamp's bounds themselves, and NaN (not
    zero) for a NaN probability, so a broken gate stays visible."""
    return _BernoulliKL.apply(probs, float(rho), float(eps))


class _NormalizeRows(torch.autograd.Function):
    """:func:`normalize_rows` as one autograd function: the value ``x / max(||x||, eps)`` (a zero
    row is divided by ``inf`` instead, so it comes out zero in the same pass), the gradient
    ``(g - y (y . g)) / ||x||`` (``y`` the output; ``g / eps`` below ``eps``, where the norm is
    clamped; zero at a zero row). Autograd's graph of the same expression takes twice the passes
    over the ``(n, d)`` rows."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, eps: float) -> torch.Tensor:
        norm = torch.linalg.vector_norm(x, dim=-1, keepdim=True)
        y = x / _row_divisor(norm, eps)
        ctx.save_for_backward(y, norm)
        ctx.eps = eps
        return y

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        y, norm = ctx.saved_tensors
        return _normalize_backward(y, norm, grad, ctx.eps), None


def _row_divisor(norm: torch.Tensor, eps: float) -> torch.Tensor:
    """What :func:`normalize_rows` divides each row by: ``max(||x||, eps)``, and ``inf`` for a
    zero row, which so comes out zero in the division itself (no second pass over the rows)."""
    return norm.clamp_min(eps).masked_fill_(norm == 0, math.inf)


def _normalize_backward(
    y: torch.Tensor, norm: torch.Tensor, grad: torch.Tensor, eps: float, in_place: bool = False
) -> torch.Tensor:
    """The gradient of ``y = normalize_rows(x)``: ``(g - y (y . g)) / max(||x||, eps)``, with the
    norm's own term only where it is not clamped and zero at a zero row. ``in_place`` writes it
    into ``grad`` (a gradient the caller owns)."""
    inverse = torch.where(norm == 0, torch.zeros_like(norm), norm.clamp_min(eps).reciprocal())
    # the norm's own gradient flows only where it is not clamped
    dot = (y * grad).sum(dim=-1, keepdim=True) * (norm >= eps)
    if in_place:
        return grad.addcmul_(y, dot, value=-1.0).mul_(inverse)
    return torch.addcmul(grad, y, dot, value=-1.0).mul_(inverse)


class _GatedNormalize(torch.autograd.Function):
    """``v = normalize_rows(normalize_rows(p) * m)`` as one autograd function, for ``m`` of the
    shape of ``p``: the same operations as the three functions in a row, so the same values and
    gradients bit for bit, with the product written into the tensor that becomes ``v`` and the
    backward's products into the gradient it computes (three ``(n, k)`` tensors fewer to
    allocate per step)."""

    @staticmethod
    def forward(ctx, p: torch.Tensor, mask: torch.Tensor, eps: float) -> torch.Tensor:
        norm_u = torch.linalg.vector_norm(p, dim=-1, keepdim=True)
        u = p / _row_divisor(norm_u, eps)
        gated = u * mask
        norm_v = torch.linalg.vector_norm(gated, dim=-1, keepdim=True)
        v = gated.div_(_row_divisor(norm_v, eps))
        ctx.save_for_backward(u, mask, v, norm_u, norm_v)
        ctx.eps = eps
        return v

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None, None]:
        u, mask, v, norm_u, norm_v = ctx.saved_tensors
        grad_gated = _normalize_backward(v, norm_v, grad, ctx.eps)
        grad_mask = grad_gated * u if ctx.needs_input_grad[1] else None
        grad_p = None
        if ctx.needs_input_grad[0]:
            grad_u = grad_gated.mul_(mask)
            grad_p = _normalize_backward(u, norm_u, grad_u, ctx.eps, in_place=True)
        return grad_p, grad_mask, None


class _InfoNCE(torch.autograd.Function):
    """:func:`info_nce`: InfoNCE of ``v`` against the rows ``all_v`` (``v`` itself on one
    process), as one autograd function.

    Forward: the logits ``s = v all_v^T / T``, each row's own entry set to the float32 minimum
    in place; ``log_den = logsumexp_j s_ij`` and ``log_num = logsumexp_{j in P(i)} s_ij``, each
    as ``torch.logsumexp`` computes it (``log(sum(e^(s - max))) + max``), so the loss
    ``mean(log_den - log_num)`` is the value of ``losses.info_nce_loss``, bit for bit.
    The numerator's exponentials are taken with the other images' entries set to 0 and then
    zeroed, so ``exp`` never sees the minimum there (on the CPU it takes a slow path for every
    input that underflows, several times its usual time).

    Backward: ``dL/ds_ij = (e_den_ij / S_den_i - e_num_ij / S_num_i) / n`` from the forward's
    exponentials ``e`` and sums ``S``; then ``dL/dv = G all_v`` and ``dL/dall_v = G^T v`` with
    ``G = dL/ds / T``. When ``all_v`` is ``v`` the two are one product, ``(G + G^T) v``: two
    ``(n, n, d)`` matrix products per step instead of autograd's three (solo-learn's
    ``simclr_loss_func`` takes three too).
    """

    @staticmethod
    def forward(
        ctx,
        v: torch.Tensor,
        all_v: torch.Tensor,
        different: torch.Tensor,
        offset: int,
        temperature: float,
    ) -> torch.Tensor:
        logits = torch.mm(v, all_v.T).div_(temperature)
        lowest = torch.finfo(logits.dtype).min
        logits.diagonal(offset).fill_(lowest)  # row i's own entry: column i + offset
        den_shift = _logsumexp_shift(logits)
        den_exp = torch.sub(logits, den_shift).exp_()
        num_exp = logits.masked_fill(different, lowest)
        num_shift = _logsumexp_shift(num_exp)
        num_exp.sub_(num_shift).masked_fill_(different, 0.0).exp_().masked_fill_(different, 0.0)
        den_sum, num_sum = den_exp.sum(dim=1), num_exp.sum(dim=1)
        log_den = den_sum.log().add_(den_shift.squeeze(1))
        log_num = num_sum.log().add_(num_shift.squeeze(1))
        ctx.save_for_backward(v, all_v, den_exp, num_exp, den_sum, num_sum, log_den, log_num)
        ctx.same = all_v is v
        ctx.temperature = temperature
        return (log_den - log_num).mean()

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        v, all_v, den_exp, num_exp, den_sum, num_sum, log_den, log_num = ctx.saved_tensors
        lowest = torch.finfo(den_exp.dtype).min
        scale = grad / (v.shape[0] * ctx.temperature)
        # a row whose every entry is the minimum (no positive, or no other row: possible only
        # without the input check) gets no gradient from that term, as autograd's masked_fill
        # gives it
        den_weight = (scale / den_sum).masked_fill_(log_den == lowest, 0.0)
        num_weight = (scale / num_sum).masked_fill_(log_num == lowest, 0.0).neg_()
        with torch.autocast(device_type=v.device.type, enabled=False):  # float32, as forward
            g = torch.mul(den_exp, den_weight[:, None]).addcmul_(num_exp, num_weight[:, None])
            if ctx.same:
                return torch.mm(g + g.T, v), None, None, None, None
            return torch.mm(g, all_v), torch.mm(g.T, v), None, None, None


def _logsumexp_shift(x: torch.Tensor) -> torch.Tensor:
    """The shift ``torch.logsumexp(x, dim=1)`` subtracts: the row maximum, 0 where it is
    infinite, as a column ``(n, 1)``."""
    shift = x.amax(dim=1, keepdim=True)
    return shift.masked_fill_(shift.abs() == math.inf, 0.0)


class _StraightThroughThreshold(torch.autograd.Function):
    """:func:`hard_threshold_ste`: ``1[p > t]`` forward, the identity backward.

    The value is ``clamp(ceil(p - t), 0, 1) + 0``: ``p - t`` is computed in the dtype of ``p``
    with ``t`` rounded to it, as the comparison ``p > t`` is, and is never rounded to 0 unless
    ``p == t``, so its ceiling is 1 exactly where ``p > t`` (the clamp for ``|p - t| >= 1``);
    ``+ 0`` turns the ``-0`` that ``ceil`` gives in ``(-1, 0)`` into ``0``. NaN stays NaN, as in
    ``m + p - sg(p)``. Four passes into one new tensor, where the comparison, its conversion to
    float and the two additions wrote four; the backward hands the gradient on without a pass.
    """

    @staticmethod
    def forward(ctx, probs: torch.Tensor, threshold: float) -> torch.Tensor:
        return torch.sub(probs, threshold).ceil_().clamp_(0.0, 1.0).add_(0.0)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad, None


class _BernoulliKL(torch.autograd.Function):
    """Forward and backward of :func:`bernoulli_kl` in few passes over the ``(N, k)`` gates.

    With ``a = clamp(alpha, eps, 1 - eps)``, ``c = log(1 - a) - log(1 - rho)`` and
    ``d = log a - log rho - c``, the per-gate KL is ``a (log a - log rho) + (1 - a) c = a d + c``
    and its derivative in ``alpha`` is ``d`` inside the clamp range, 0 outside (the clamp's).
    A sum that rounding makes negative is 0 and passes no gradient, as in the definition.
    """

    @staticmethod
    def forward(ctx, probs: torch.Tensor, rho: float, eps: float) -> torch.Tensor:
        alpha = probs.float().clamp(eps, 1.0 - eps)
        # 1 - a is exact or within half an ulp for a in [eps, 1 - eps], so log(1 - a) is as
        # accurate as log1p(-a) here (and vectorised on the CPU, where log1p is not)
        closed = torch.rsub(alpha, 1.0).log_().sub_(math.log1p(-rho))
        logit_diff = torch.log(alpha).sub_(math.log(rho)).sub_(closed)
        kl = closed.addcmul_(alpha, logit_diff).sum(dim=-1).mean()  # in place: c is not kept
        negative = kl < 0  # rounding below 0 (gates at the prior); NaN is kept, as its gradient
        # the clamp passes gradient strictly inside (eps, 1 - eps): the gradient d is zeroed,
        # once and in place, where alpha is clamped (NaN is neither, and stays NaN)
        clamped = (alpha <= eps).logical_or_(alpha >= 1.0 - eps)
        ctx.save_for_backward(logit_diff.masked_fill_(clamped, 0.0), negative)
        ctx.rows = probs.numel() // max(probs.shape[-1], 1) if probs.ndim else 1
        ctx.dtype = probs.dtype
        return kl.masked_fill_(negative, 0.0)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        gradient, negative = ctx.saved_tensors
        scale = (grad / ctx.rows).masked_fill_(negative, 0.0)
        return (gradient * scale).to(ctx.dtype), None, None
