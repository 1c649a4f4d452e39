"""Contrastive losses on (gated) non-negative features (docs/method.md, "The objective").

BayesNCL (Cui, Zhang & Hu, arXiv 2605.28441) trains with InfoNCE (SimCLR's NT-Xent, Chen et al.
2020) on the gated representation ``v = normalize(normalize(phi(z)) * m)`` plus ``lambda`` times
the Bernoulli KL of :mod:`solo_bayesncl.core.gates`; NCL (Wang et al., arXiv 2403.12459) is InfoNCE on
``normalize(phi(z))``.

The functions compute one term each; :class:`NCLLoss` and :class:`BayesNCLLoss` are the two
objectives as ``nn.Module`` s that own and check their hyperparameters once, in any training
loop (the solo-learn methods use them too)::

    criterion = BayesNCLLoss(temperature=0.2, prior=0.8, kl_lambda=3e-5)
    loss = criterion(z, gate_logits, indexes)   # InfoNCE(v) + lambda * KL
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import nn

from solo_bayesncl.core.distributed import gather_no_grad, gather_with_grad, rank
from solo_bayesncl.core.gates import BernoulliGate, GateOutput, bernoulli_kl
from solo_bayesncl.core.nonneg import non_negative, resolve_non_neg
from solo_bayesncl.core.validation import require_int, require_range

__all__ = [
    "BayesNCLLoss",
    "LossTerms",
    "NCLLoss",
    "gated_representation",
    "info_nce_loss",
    "keep_top_k",
    "normalize_rows",
    "non_negative_representation",
]


#: The norm below which :func:`normalize_rows` divides by this instead (``F.normalize``'s).
NORMALIZE_EPS = 1e-12


def normalize_rows(x: torch.Tensor, eps: float = NORMALIZE_EPS) -> torch.Tensor:
    """``x / ||x||`` along the last dim, like ``F.normalize``; an all-zero row stays zero and
    passes zero gradient.

    ``F.normalize`` divides by ``max(||x||, eps)``, so at an all-zero row (every gate closed, or
    ``rep_relu`` of an all-negative row) it multiplies the incoming gradient by ``1 / eps =
    1e12``: finite in float32 but inf once cast to fp16 (e.g. into the gating head under mixed
    precision). ``x / ||x||`` has no limit at 0, so such a row's gradient is taken as zero.
    A row holding NaN or Inf comes out NaN (never zero), so a broken model stays visible.
    """
    return _NormalizeRows.apply(x, float(eps))


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


def _non_negative(z: torch.Tensor, non_neg: str, top_k: int | None) -> torch.Tensor:
    """``phi(z)`` in float32 (with the row maximum taken out first for ``exp``), its ``top_k``
    largest entries alone with ``top_k``: what :func:`non_negative_representation` normalises."""
    z = z.float()
    if resolve_non_neg(non_neg) == "exp":
        z = z - z.detach().amax(dim=-1, keepdim=True)
    z_pos = non_negative(z, non_neg)
    if top_k is not None:
        z_pos = keep_top_k(z_pos, top_k)
    return z_pos


def non_negative_representation(
    z: torch.Tensor, non_neg: str = "relu", top_k: int | None = None
) -> torch.Tensor:
    """``u = phi(z) / ||phi(z)||`` in float32 (NCL, arXiv 2403.12459); a row whose ``phi(z)`` is
    all zero stays zero. With ``top_k``, only the ``top_k`` largest entries of ``phi(z)`` are kept
    before normalising (the NCL+TopK baseline of arXiv 2605.28441).

    For ``exp`` the row maximum is subtracted first: ``normalize(exp(z - c)) = normalize(exp(z))``
    for any per-row ``c``, and without the shift ``exp`` overflows float32 (``z`` > 88, or its
    squared norm from ``z`` > 44) and the row becomes NaN or silently zero.
    """
    return normalize_rows(_non_negative(z, non_neg, top_k))


def gated_representation(
    z: torch.Tensor, mask: torch.Tensor, non_neg: str = "relu", top_k: int | None = None
) -> torch.Tensor:
    """``v = normalize(u * m)`` with ``u = normalize(phi(z))`` (arXiv 2605.28441, section 3).

    ``mask`` is the gate (hard with straight-through, or soft ``alpha``). A sample whose gates are
    all closed gives ``v = 0``; its gates then get no gradient from the InfoNCE term (only the KL's).
    ``top_k`` is passed to :func:`non_negative_representation`.
    """
    z_pos = _non_negative(z, non_neg, top_k)
    mask = mask.float()
    if mask.shape != z_pos.shape:  # a mask that broadcasts: the three functions in a row
        return normalize_rows(normalize_rows(z_pos) * mask)
    return _GatedNormalize.apply(z_pos, mask, NORMALIZE_EPS)


def keep_top_k(z: torch.Tensor, k: int) -> torch.Tensor:
    """Keeps the ``k`` largest entries of every row and zeroes the others (NCL+TopK baseline).

    Exactly ``k`` per row: among tied values, the ones ``torch.topk`` returns are kept.
    """
    if k >= z.shape[-1]:
        return z
    keep = torch.zeros_like(z).scatter_(-1, torch.topk(z, k, dim=-1).indices, 1.0)
    return z * keep


#: How far a row's L2 norm may exceed 1 and still count as normalised (float32 rounding).
NORM_TOLERANCE = 1e-3


def _check_rows(v: torch.Tensor, different: torch.Tensor) -> None:
    """Raises when rows of ``v`` are not finite, not L2-normalised (norm above 1) or have no
    positive (one device read). ``different[i, j]``: row ``j`` of the gathered batch is another
    image than row ``i`` (a row is the same image as itself, so it needs two same-image rows)."""
    norms = torch.linalg.vector_norm(v, dim=1)
    non_finite, unnormalised, lonely = torch.stack(
        [
            (~torch.isfinite(v)).any(dim=1).sum(),
            (norms > 1 + NORM_TOLERANCE).sum(),
            ((~different).sum(dim=1) < 2).sum(),
        ]
    ).tolist()
    n = v.shape[0]
    if non_finite:
        raise ValueError(f"v: {non_finite} of {n} rows hold NaN or Inf values")
    if unnormalised:
        raise ValueError(
            f"v: {unnormalised} of {n} rows have an L2 norm above 1; the loss reads L2-normalised "
            "rows (zero rows allowed): normalise them first, e.g. with normalize_rows"
        )
    if lonely:
        raise ValueError(
            f"indexes: {lonely} of {n} rows have no positive (no other row with the same "
            "identifier); every image needs two or more views"
        )


def info_nce_loss(
    v: torch.Tensor,
    indexes: torch.Tensor,
    temperature: float = 0.2,
    gather_distributed: bool = True,
    check_inputs: bool = True,
) -> torch.Tensor:
    """InfoNCE / NT-Xent over all views of the (global) batch, in log-sum-exp form.

    For every row ``i``: ``-log( sum_{j in P(i)} e^{s_ij / T} / sum_{j != i} e^{s_ij / T} )`` with
    ``s_ij = v_i . v_j``, ``P(i)`` the other views of the same image (same value in ``indexes``)
    and the denominator over every other row of the gathered batch; the loss is the mean over rows.
    With one positive per row this is SimCLR's loss. Computed in float32 with autocast disabled,
    so it is exact under fp16/bf16 mixed precision; rows of zeros give finite values.

    Args:
        v: ``(n, d)`` features, expected already L2-normalised (zero rows allowed).
        indexes: ``(n,)`` image identifiers; rows with the same identifier are positives. Every
            row needs at least one positive (two or more views per image).
        temperature: ``T`` > 0.
        gather_distributed: compare against the rows of every process (DDP), with gradients.
        check_inputs: raise when a row of ``v`` holds NaN/Inf or has no positive. The check reads
            two counts back from the device (one synchronisation); the training steps turn it off
            (the config guarantees two views) and stop on a non-finite loss instead.

    Raises:
        ValueError: ``temperature`` is not a finite number > 0 whose inverse is finite,
            ``v`` is not 2-D or has no rows, ``indexes`` does not match the rows of ``v``, and
            with ``check_inputs``: a row of ``v`` is not finite, has an L2 norm above 1 (not
            normalised), or has no positive (its loss would be infinite).
    """
    temperature = float(temperature)
    if not (math.isfinite(temperature) and temperature > 0 and math.isfinite(1 / temperature)):
        raise ValueError(f"temperature={temperature} must be a finite number > 0")
    if v.ndim != 2:
        raise ValueError(f"v must be 2-D (rows x dims), got shape {tuple(v.shape)}")
    if v.shape[0] == 0:
        raise ValueError("v has no rows: the loss is a mean over rows, undefined for none")
    if indexes.shape != (v.shape[0],):
        raise ValueError(
            f"indexes must have shape ({v.shape[0]},), one identifier per row of v "
            f"{tuple(v.shape)}; got {tuple(indexes.shape)}"
        )
    with torch.autocast(device_type=v.device.type, enabled=False):
        v = v.float()
        all_v = gather_with_grad(v) if gather_distributed else v
        all_idx = gather_no_grad(indexes) if gather_distributed else indexes
        different = indexes[:, None] != all_idx[None, :]
        if check_inputs:
            _check_rows(v, different)
        offset = v.shape[0] * rank() if gather_distributed else 0
        return _InfoNCE.apply(v, all_v, different, offset, temperature)


class _InfoNCE(torch.autograd.Function):
    """:func:`info_nce_loss` on ``v`` against the rows ``all_v`` (``v`` itself on one process), as
    one autograd function.

    Forward: the logits ``s = v all_v^T / T``, each row's own entry set to the float32 minimum
    in place; ``log_den = logsumexp_j s_ij`` and ``log_num = logsumexp_{j in P(i)} s_ij``, each
    as ``torch.logsumexp`` computes it (``log(sum(e^(s - max))) + max``), so the loss
    ``mean(log_den - log_num)`` is the value of the autograd expression it replaces, bit for bit.
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


@dataclass
class LossTerms:
    """The parts of an objective's value, for a training step to log.

    Attributes:
        loss: the objective (what ``forward`` returns).
        nce: its InfoNCE term.
        representation: the representation InfoNCE compared (``u`` or ``v``).
        logged: further terms under their log names (``train_kl_loss``, gate statistics).
    """

    loss: torch.Tensor
    nce: torch.Tensor
    representation: torch.Tensor
    logged: dict[str, torch.Tensor] = field(default_factory=dict)


class NCLLoss(nn.Module):
    """InfoNCE on ``u = normalize(phi(z))`` (NCL, Wang et al., arXiv 2403.12459).

    Args:
        temperature: ``T`` > 0.
        non_neg: the non-negativity map ``phi`` (:data:`solo_bayesncl.core.nonneg.NON_NEGATIVITY_MAPS`).
        top_k: keep only the ``top_k`` largest entries of ``phi(z)`` (the NCL+TopK baseline of
            arXiv 2605.28441); None keeps all.
        gather_distributed: compare against the views of every process under DDP.
        check_inputs: refuse non-finite, unnormalised or positive-less rows and (BayesNCL) gate
            probabilities outside [0, 1] (each check reads one count back from the device).
        dimension_dropout: in training mode, the share ``p`` in [0, 1) of ``u``'s entries zeroed
            at random (each entry of every row kept with probability ``1 - p``, independently;
            then ``v = normalize(u * m)`` is compared, as a gate's mask would be); 0 compares
            ``u``. A random gate with no gating head and no prior: the control for BayesNCL's
            binary-concrete gate, whose noise closes gates at random in training.

    ``forward(z, indexes)``: ``z`` the ``(n, k)`` projector outputs of every view, ``indexes``
    the image of each row (views of one image are positives)::

        criterion = NCLLoss(temperature=0.2, non_neg="rep_relu")
        loss = criterion(torch.cat([z1, z2]), torch.cat([idx, idx]))
    """

    def __init__(
        self,
        temperature: float = 0.2,
        non_neg: str = "rep_relu",
        top_k: int | None = None,
        gather_distributed: bool = True,
        check_inputs: bool = True,
        dimension_dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.temperature = require_range("temperature", temperature, low=0.0, high=math.inf)
        self.non_neg = resolve_non_neg(non_neg)
        self.top_k = None if top_k is None else require_int("top_k", top_k, low=1)
        self.gather_distributed = bool(gather_distributed)
        self.check_inputs = bool(check_inputs)
        self.dimension_dropout = require_range(
            "dimension_dropout", dimension_dropout, 0.0, 1.0, low_inclusive=True
        )

    def representation(self, z: torch.Tensor) -> torch.Tensor:
        """``u = normalize(phi(z))`` (:func:`non_negative_representation`)."""
        return non_negative_representation(z, self.non_neg, self.top_k)

    def contrast(self, v: torch.Tensor, indexes: torch.Tensor) -> torch.Tensor:
        """InfoNCE of a representation (:func:`info_nce_loss` with this loss's settings)."""
        return info_nce_loss(
            v,
            indexes,
            temperature=self.temperature,
            gather_distributed=self.gather_distributed,
            check_inputs=self.check_inputs,
        )

    def dropout_mask(self, z: torch.Tensor) -> torch.Tensor | None:
        """The mask of ``dimension_dropout`` for the rows of ``z``, drawn from torch's global
        generator (so a seeded run draws the same masks): in training mode with ``p > 0``, True
        where an entry is kept (probability ``1 - p``); None otherwise."""
        if not self.training or self.dimension_dropout == 0.0:
            return None
        return torch.rand(z.shape, device=z.device) >= self.dimension_dropout

    def terms(self, z: torch.Tensor, indexes: torch.Tensor) -> LossTerms:
        """The loss with the representation it compared: ``u``, or in training with
        ``dimension_dropout`` the randomly masked ``v = normalize(u * m)``."""
        mask = self.dropout_mask(z)
        if mask is None:
            u = self.representation(z)
            nce = self.contrast(u, indexes)
            return LossTerms(loss=nce, nce=nce, representation=u)
        v = gated_representation(z, mask, self.non_neg, self.top_k)
        nce = self.contrast(v, indexes)
        return LossTerms(
            loss=nce,
            nce=nce,
            representation=v,
            logged={"train_dimension_kept_ratio": mask.float().mean()},
        )

    def forward(self, z: torch.Tensor, indexes: torch.Tensor) -> torch.Tensor:
        return self.terms(z, indexes).loss

    def extra_repr(self) -> str:
        dropout = f", dimension_dropout={self.dimension_dropout}" if self.dimension_dropout else ""
        return (
            f"temperature={self.temperature}, non_neg={self.non_neg!r}, top_k={self.top_k}{dropout}"
        )


class BayesNCLLoss(NCLLoss):
    """InfoNCE on the gated ``v = normalize(u * m)`` plus ``lambda * KL(q(m) || Bernoulli(rho))``
    (BayesNCL, Cui, Zhang & Hu, arXiv 2605.28441, section 3; docs/method.md, "The objective").

    Args:
        temperature, non_neg, top_k, gather_distributed, check_inputs: as :class:`NCLLoss`.
        prior: ``rho`` in (0, 1), the prior open probability of a gate.
        kl_lambda: ``lambda`` >= 0, the weight of the KL (0 trains the gate by InfoNCE only).
        gate_type, threshold, gate_temperature: the hard gate
            (:class:`solo_bayesncl.core.gates.BernoulliGate`).
        kl_eps: clamp of ``alpha`` and ``rho`` in the KL, in (0, 0.5).

    ``forward(z, gate_logits, indexes)``: ``gate_logits`` are the gating head's outputs ``a`` for
    the same rows as ``z``::

        criterion = BayesNCLLoss(temperature=0.2, prior=0.8, kl_lambda=3e-5)
        loss = criterion(z, gating_head(feats), indexes)
    """

    def __init__(
        self,
        temperature: float = 0.2,
        non_neg: str = "rep_relu",
        prior: float = 0.8,
        kl_lambda: float = 3e-5,
        gate_type: str = "ste",
        threshold: float = 0.5,
        gate_temperature: float = 1.0,
        kl_eps: float = 0.01,
        top_k: int | None = None,
        gather_distributed: bool = True,
        check_inputs: bool = True,
    ) -> None:
        super().__init__(temperature, non_neg, top_k, gather_distributed, check_inputs)
        self.prior = require_range("prior", prior, low=0.0, high=1.0)
        self.kl_lambda = require_range("kl_lambda", kl_lambda, 0.0, math.inf, low_inclusive=True)
        self.kl_eps = require_range("kl_eps", kl_eps, low=0.0, high=0.5)
        self.gate = BernoulliGate(gate_type, threshold, gate_temperature)

    def gated(self, z: torch.Tensor, gate: GateOutput) -> torch.Tensor:
        """``v = normalize(u * m)`` for a gate's mask (:func:`gated_representation`)."""
        return gated_representation(z, gate.mask, self.non_neg, self.top_k)

    def terms(self, z: torch.Tensor, gate_logits: torch.Tensor, indexes: torch.Tensor) -> LossTerms:
        """The loss with its InfoNCE and KL terms, the gated representation and gate statistics."""
        gate = self.gate(gate_logits, mode="hard")
        v = self.gated(z, gate)
        nce = self.contrast(v, indexes)
        kl = bernoulli_kl(gate.probs, self.prior, eps=self.kl_eps, check_inputs=self.check_inputs)
        return LossTerms(
            loss=nce + self.kl_lambda * kl,
            nce=nce,
            representation=v,
            logged={
                "train_kl_loss": kl,
                "train_gate_open_ratio": gate.open_ratio,
                "train_gate_prob_mean": gate.probs.mean(),
            },
        )

    def forward(
        self, z: torch.Tensor, gate_logits: torch.Tensor, indexes: torch.Tensor
    ) -> torch.Tensor:
        return self.terms(z, gate_logits, indexes).loss

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, prior={self.prior}, kl_lambda={self.kl_lambda}"
