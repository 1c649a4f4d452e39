"""The Bernoulli gate of BayesNCL and its KL to the prior (docs/method.md: "The gate", "The KL to the prior").

A gating head ``q`` reads the stop-gradient backbone features and gives one logit per feature
dimension. BayesNCL (Cui, Zhang & Hu, arXiv 2605.28441) treats each dimension's gate as a Bernoulli
variable with probability ``alpha = sigmoid(q(sg(h)) / tau_g)``, opens it when ``alpha > t`` and
passes gradients through the threshold with a straight-through estimator. A Bernoulli(``rho``)
prior on every gate is enforced by the KL term of :func:`bernoulli_kl`.

Example::

    gate = BernoulliGate(gate_type="ste", threshold=0.5, temperature=1.0)
    out = gate(gating_head(h.detach()))          # GateOutput(mask, probs)
    v = F.normalize(u * out.mask, dim=-1)
    kl = bernoulli_kl(out.probs, prior=0.8)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

__all__ = [
    "GATE_MODES",
    "GATE_TYPES",
    "BernoulliGate",
    "GateOutput",
    "bernoulli_kl",
    "binary_concrete_sample",
    "gate_probabilities",
    "gumbel_sample",
    "hard_threshold_ste",
    "resolve_gate_type",
]

GATE_TYPES: tuple[str, ...] = ("ste", "binary_concrete", "gumbel")
"""How the hard gate is drawn in training (evaluation always thresholds ``alpha`` itself):

- ``ste``: deterministic threshold of ``alpha`` (the paper's main variant, the default);
- ``binary_concrete``: threshold of a binary-concrete sample (logistic noise, Maddison et al.,
  2017): a gate with logit ``a`` opens with probability ``sigmoid(a)`` at ``t = 0.5``;
- ``gumbel``: threshold of ``sigmoid((a + g) / tau_g)`` with a single Gumbel sample ``g``, as the
  official BayesNCL code computes its ``gumbel_sigmoid`` gate: open with probability
  ``1 - exp(-exp(a))`` at ``t = 0.5``, i.e. ``1 - 1/e = 0.632`` at logit 0.

``STE`` and the official ``gumbel_sigmoid`` are accepted and mean what the official code computes
(``ste`` and ``gumbel``)."""

GATE_MODES: tuple[str, ...] = ("hard", "soft")
"""How a trained gate is read: ``hard`` thresholds ``alpha`` (0/1 mask), ``soft`` uses ``alpha``
itself as the mask (docs/method.md, "The gate")."""

_GATE_ALIASES = {
    "ste": "ste",
    "binary_concrete": "binary_concrete",
    "gumbel": "gumbel",
    "gumbel_sigmoid": "gumbel",
}


def resolve_gate_type(name: str, key: str = "gate_type") -> str:
    """Canonical gate type; accepts the official spellings ``STE`` (any case) and
    ``gumbel_sigmoid`` (the official single-Gumbel gate, i.e. ``gumbel``)."""
    canonical = _GATE_ALIASES.get(str(name).lower())
    if canonical is None:
        raise ValueError(
            f"{key}={name!r} is not supported; allowed values: {', '.join(GATE_TYPES)} "
            "(official spellings STE and gumbel_sigmoid accepted)"
        )
    return canonical


def gate_probabilities(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """``alpha = sigmoid(logits / tau_g)`` (docs/method.md, "The gate"); at ``tau_g = 1`` the
    division (an exact no-op) is skipped."""
    return torch.sigmoid(logits if temperature == 1.0 else logits / temperature)


def hard_threshold_ste(probs: torch.Tensor, threshold: float = 0.5) -> torch.Tensor:
    """Hard gate ``1[probs > t]`` with a straight-through gradient (docs/method.md, "The gate").

    The value is exactly 0 or 1 (NaN where ``probs`` is NaN, so a broken gate stays visible); the
    gradient with respect to ``probs`` is the identity: the value and gradient of the official
    ``m + probs - sg(probs)``, in one pass over the gates each way.
    """
    return _StraightThroughThreshold.apply(probs, float(threshold))


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


def binary_concrete_sample(
    logits: torch.Tensor,
    temperature: float = 1.0,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """A relaxed Bernoulli sample ``sigmoid((logits + log U - log(1 - U)) / tau_g)``.

    This is the binary-concrete distribution (Maddison et al., 2017; Jang et al., 2017): the noise
    is the difference of two Gumbels, i.e. a logistic sample. The official BayesNCL code adds a
    single Gumbel sample instead (:func:`gumbel_sample`), a different distribution.
    """
    u = torch.rand(logits.shape, generator=generator, device=logits.device, dtype=torch.float32)
    u = u.clamp(torch.finfo(torch.float32).tiny, 1.0 - torch.finfo(torch.float32).eps)
    noise = (torch.log(u) - torch.log1p(-u)).to(logits.dtype)
    return torch.sigmoid((logits + noise) / temperature)


def gumbel_sample(
    logits: torch.Tensor,
    temperature: float = 1.0,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """``sigmoid((logits + g) / tau_g)`` with one Gumbel sample ``g = -log(-log(U + 1e-4) + 1e-4)``.

    The official BayesNCL code's ``gumbel_sigmoid`` gate, with its two 1e-4 margins: not a
    relaxed Bernoulli (that needs the difference of two Gumbels, :func:`binary_concrete_sample`),
    so a gate opens more often than ``alpha`` says (``1 - 1/e`` at logit 0 and ``t = 0.5``).
    """
    u = torch.rand(logits.shape, generator=generator, device=logits.device, dtype=torch.float32)
    noise = (-torch.log(-torch.log(u + 1e-4) + 1e-4)).to(logits.dtype)
    return torch.sigmoid((logits + noise) / temperature)


class _BernoulliKL(torch.autograd.Function):
    """Forward and backward of :func:`bernoulli_kl` in few passes over the ``(N, k)`` gates.

    With ``a = clamp(alpha, eps, 1 - eps)``, ``c = log(1 - a) - log(1 - rho)`` and
    ``d = log a - log rho - c``, the per-gate KL is ``a (log a - log rho) + (1 - a) c = a d + c``
    and its derivative in ``alpha`` is ``d`` inside the clamp range, 0 outside (the clamp's).
    """

    @staticmethod
    def forward(ctx, probs: torch.Tensor, rho: float, eps: float) -> torch.Tensor:
        alpha = probs.float().clamp(eps, 1.0 - eps)
        # 1 - a is exact or within half an ulp for a in [eps, 1 - eps], so log(1 - a) is as
        # accurate as log1p(-a) here (and vectorised on the CPU, where log1p is not)
        closed = torch.rsub(alpha, 1.0).log_().sub_(math.log1p(-rho))
        logit_diff = torch.log(alpha).sub_(math.log(rho)).sub_(closed)
        kl = closed.addcmul_(alpha, logit_diff).sum(dim=-1).mean()  # in place: c is not kept
        # the clamp passes gradient strictly inside (eps, 1 - eps): the gradient d is zeroed,
        # once and in place, where alpha is clamped (NaN is neither, and stays NaN)
        clamped = (alpha <= eps).logical_or_(alpha >= 1.0 - eps)
        ctx.save_for_backward(logit_diff.masked_fill_(clamped, 0.0))
        ctx.rows = probs.numel() // max(probs.shape[-1], 1) if probs.ndim else 1
        ctx.dtype = probs.dtype
        return kl

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        (gradient,) = ctx.saved_tensors
        return (gradient * (grad / ctx.rows)).to(ctx.dtype), None, None


def bernoulli_kl(
    probs: torch.Tensor, prior: float, eps: float = 0.01, check_inputs: bool = True
) -> torch.Tensor:
    """KL(Bernoulli(alpha) || Bernoulli(rho)), summed over dimensions, averaged over samples.

    ``KL = sum_k [alpha_k log(alpha_k / rho) + (1 - alpha_k) log((1 - alpha_k) / (1 - rho))]``
    with ``alpha`` and ``rho`` clamped to ``[eps, 1 - eps]`` (docs/method.md, "The KL to the prior"; official eps = 0.01),
    computed in float32 whatever the input precision.

    Args:
        probs: gate probabilities ``alpha`` in [0, 1], shape ``(N, k)`` with ``N >= 1``; NaN
            entries give a NaN KL (a broken gate stays visible).
        prior: the prior open probability ``rho`` in (0, 1).
        eps: clamp margin in (0, 0.5).
        check_inputs: refuse values outside [0, 1]; reads one count back from the device, so
            the training step (whose ``alpha`` is a sigmoid) turns it off.

    Raises:
        ValueError: ``prior`` outside (0, 1) or ``eps`` outside (0, 0.5), naming the argument;
            ``probs`` empty, or (with ``check_inputs``) holding values outside [0, 1] (the clamp is for probabilities
            near 0 and 1, not for numbers that are not probabilities).
    """
    if not 0.0 < float(prior) < 1.0:  # also refuses NaN
        raise ValueError(f"prior={prior} must be in (0, 1)")
    if not 0.0 < float(eps) < 0.5:
        raise ValueError(f"eps={eps} must be in (0, 0.5)")
    if probs.numel() == 0:
        raise ValueError(
            f"probs has shape {tuple(probs.shape)}: no gate probabilities, the KL's mean over "
            "samples is undefined"
        )
    outside = int(((probs < 0) | (probs > 1)).sum()) if check_inputs else 0  # NaN: kept
    if outside:
        low, high = float(probs.min()), float(probs.max())
        raise ValueError(
            f"probs: {outside} of {probs.numel()} values lie outside [0, 1] (range {low:g} to "
            f"{high:g}); pass probabilities, e.g. sigmoid(logits)"
        )
    rho = min(max(float(prior), eps), 1.0 - eps)
    return _BernoulliKL.apply(probs, rho, float(eps))


_SAMPLERS = {"binary_concrete": binary_concrete_sample, "gumbel": gumbel_sample}


@dataclass
class GateOutput:
    """What :class:`BernoulliGate` returns.

    Attributes:
        mask: the gate applied to the features, shape ``(N, k)``: hard 0/1 values with a
            straight-through gradient (training and ``mode="hard"``) or ``alpha`` (``mode="soft"``).
        probs: ``alpha``, the gate probabilities the KL term reads.
    """

    mask: torch.Tensor
    probs: torch.Tensor

    @property
    def open_ratio(self) -> torch.Tensor:
        """Share of gates open (mask > 0.5) over the batch and dimensions."""
        return (self.mask.detach() > 0.5).float().mean()


class BernoulliGate(nn.Module):
    """Hard Bernoulli gate with a straight-through estimator (BayesNCL, arXiv 2605.28441).

    Args:
        gate_type: one of :data:`GATE_TYPES` (official ``"STE"`` and ``"gumbel_sigmoid"`` accepted).
        threshold: ``t`` in (0, 1); a gate opens when its (sampled) probability exceeds it.
        temperature: ``tau_g`` > 0 of the sigmoid.

    ``forward(logits, mode=None)``: ``mode`` is ``"hard"`` (default) or ``"soft"``; in training
    with ``binary_concrete`` or ``gumbel`` the threshold is applied to a noisy sample, in evaluation to
    ``alpha`` itself, so evaluation is deterministic. ``"soft"`` returns ``alpha`` as the mask
    (the evaluation-time soft gate ``u * alpha``; it zeroes nothing).
    """

    def __init__(self, gate_type: str = "ste", threshold: float = 0.5, temperature: float = 1.0):
        super().__init__()
        if not 0.0 < threshold < 1.0:
            raise ValueError(f"gate_threshold={threshold} must be in (0, 1)")
        if not (math.isfinite(temperature) and temperature > 0.0):
            raise ValueError(f"sigmoid_temperature={temperature} must be > 0 and finite")
        self.gate_type = resolve_gate_type(gate_type)
        self.threshold = float(threshold)
        self.temperature = float(temperature)

    def forward(self, logits: torch.Tensor, mode: str = "hard") -> GateOutput:
        probs = gate_probabilities(logits.float(), self.temperature)
        if mode not in GATE_MODES:
            raise ValueError(
                f"gate mode={mode!r} is not supported; allowed values: {', '.join(GATE_MODES)}"
            )
        if mode == "soft":
            return GateOutput(mask=probs, probs=probs)
        if self.gate_type in _SAMPLERS and self.training:
            sample = _SAMPLERS[self.gate_type](logits.float(), self.temperature)
            return GateOutput(mask=hard_threshold_ste(sample, self.threshold), probs=probs)
        return GateOutput(mask=hard_threshold_ste(probs, self.threshold), probs=probs)

    def extra_repr(self) -> str:
        return (
            f"gate_type={self.gate_type!r}, threshold={self.threshold}, "
            f"temperature={self.temperature}"
        )
