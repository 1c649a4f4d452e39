"""BayesNCL's gate: the gating head, the Bernoulli gate and its KL to the prior (Cui, Zhang & Hu,
arXiv 2605.28441, section 3; docs/method.md: "The gate", "The KL to the prior").

The gating head ``q`` reads the stop-gradient backbone features, one logit per dimension; each
gate is open with probability ``alpha = sigmoid(q(sg(h)) / tau_g)``, hard when ``alpha > t``
with a straight-through gradient; a Bernoulli(``rho``) prior enters through :func:`bernoulli_kl`.
Hyperparameters are checked against :data:`solo_bayesncl.core.hyperparameters.RANGES`."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from solo_bayesncl.core.hyperparameters import checked

__all__ = [
    "GATE_MODES",
    "GATE_TYPES",
    "BernoulliGate",
    "GateOutput",
    "GatingHead",
    "bernoulli_kl",
    "binary_concrete_sample",
    "gate_probabilities",
    "gumbel_sample",
    "hard_threshold_ste",
    "resolve_gate_type",
]


class GatingHead(nn.Sequential):
    """BayesNCL's gating head ``a = q(sg(h))`` (arXiv 2605.28441, section 3): ``Linear -> ReLU ->
    Linear`` on the *detached* backbone features, so neither the gate nor its KL pushes on the
    backbone; the official state names (``gating_head.0.weight``...) load."""

    def __init__(self, in_dim: int, hidden_dim: int, out_dim: int) -> None:
        super().__init__(nn.Linear(in_dim, hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, out_dim))

    def forward(self, feats: torch.Tensor) -> torch.Tensor:
        return super().forward(feats.detach())


GATE_TYPES: tuple[str, ...] = ("ste", "binary_concrete", "gumbel")
"""How the hard gate is drawn in training (evaluation always thresholds ``alpha`` itself):

- ``ste``: deterministic threshold of ``alpha`` (the paper's main variant, the default);
- ``binary_concrete``: threshold of a binary-concrete sample (logistic noise, Maddison et al.,
  2017): a gate with logit ``a`` opens with probability ``sigmoid(a)`` at ``t = 0.5``;
- ``gumbel``: threshold of ``sigmoid((a + g) / tau_g)`` with a single Gumbel sample ``g``, as the
  official BayesNCL code computes its ``gumbel_sigmoid`` gate: open with probability
  ``1 - exp(-exp(a))`` at ``t = 0.5``, i.e. ``1 - 1/e = 0.632`` at logit 0."""

GATE_MODES: tuple[str, ...] = ("hard", "soft")
"""How a trained gate is read: ``hard`` thresholds ``alpha`` (0/1 mask), ``soft`` uses ``alpha``."""

_GATE_ALIASES = {**{name: name for name in GATE_TYPES}, "gumbel_sigmoid": "gumbel"}


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


def gate_probabilities(logits: torch.Tensor, sigmoid_temperature: float) -> torch.Tensor:
    """``alpha = sigmoid(logits / tau_g)`` (docs/method.md, "The gate"); skips the no-op ``/ 1``."""
    tau = checked("sigmoid_temperature", sigmoid_temperature)
    return torch.sigmoid(logits if tau == 1.0 else logits / tau)


def hard_threshold_ste(probs: torch.Tensor, gate_threshold: float) -> torch.Tensor:
    """Hard gate ``m = 1[probs > t]`` with a straight-through gradient: ``m + p - sg(p)``, the
    official code's expression (arXiv 2605.28441, section 3; docs/method.md, "The gate"). The
    value is exactly 0 or 1 (NaN where ``probs`` is NaN); the gradient is the identity."""
    gate_threshold = checked("gate_threshold", gate_threshold)
    return (probs > gate_threshold).to(probs.dtype) + (probs - probs.detach())


def binary_concrete_sample(
    logits: torch.Tensor,
    sigmoid_temperature: float,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """A relaxed Bernoulli sample ``sigmoid((logits + log U - log(1 - U)) / tau_g)``: the
    binary-concrete distribution (Maddison et al., 2017; Jang et al., 2017), whose noise is the
    difference of two Gumbels (a logistic sample), unlike the official :func:`gumbel_sample`."""
    sigmoid_temperature = checked("sigmoid_temperature", sigmoid_temperature)
    u = torch.rand(logits.shape, generator=generator, device=logits.device, dtype=torch.float32)
    u = u.clamp(torch.finfo(torch.float32).tiny, 1.0 - torch.finfo(torch.float32).eps)
    noise = (torch.log(u) - torch.log1p(-u)).to(logits.dtype)
    return torch.sigmoid((logits + noise) / sigmoid_temperature)


def gumbel_sample(
    logits: torch.Tensor,
    sigmoid_temperature: float,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """``sigmoid((logits + g) / tau_g)`` with one Gumbel sample ``g = -log(-log(U + 1e-4) + 1e-4)``:
    the official BayesNCL code's ``gumbel_sigmoid`` gate, with its two 1e-4 margins; not a relaxed
    Bernoulli, so a gate opens more often than ``alpha`` says (``1 - 1/e`` at logit 0, ``t = 0.5``)."""
    sigmoid_temperature = checked("sigmoid_temperature", sigmoid_temperature)
    u = torch.rand(logits.shape, generator=generator, device=logits.device, dtype=torch.float32)
    noise = (-torch.log(-torch.log(u + 1e-4) + 1e-4)).to(logits.dtype)
    return torch.sigmoid((logits + noise) / sigmoid_temperature)


def bernoulli_kl(
    probs: torch.Tensor, bayesian_prior_prob: float, kl_eps: float, check_inputs: bool = True
) -> torch.Tensor:
    """KL(Bernoulli(alpha) || Bernoulli(rho)), summed over dimensions, averaged over samples
    (arXiv 2605.28441, section 3; docs/method.md, "The KL to the prior"):

    ``KL = sum_k [alpha_k log(alpha_k / rho) + (1 - alpha_k) log((1 - alpha_k) / (1 - rho))]``

    with ``alpha`` and ``rho`` clamped to ``[kl_eps, 1 - kl_eps]`` (official 0.01), in float32; a
    sum rounded below 0 is 0 with no gradient. ValueError for a bad prior, clamp or empty
    ``probs`` and, with ``check_inputs`` (one device read), values outside [0, 1]."""
    bayesian_prior_prob = checked("bayesian_prior_prob", bayesian_prior_prob)
    kl_eps = checked("kl_eps", kl_eps)
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
    eps = kl_eps
    rho = min(max(float(bayesian_prior_prob), eps), 1.0 - eps)
    alpha = probs.float().clamp(eps, 1.0 - eps)
    open_ = alpha * (torch.log(alpha) - math.log(rho))
    closed = (1.0 - alpha) * (torch.log(1.0 - alpha) - math.log1p(-rho))
    kl = (open_ + closed).sum(dim=-1).mean()
    return kl.masked_fill(kl < 0, 0.0)  # rounding below 0; NaN is kept


_SAMPLERS = {"binary_concrete": binary_concrete_sample, "gumbel": gumbel_sample}


@dataclass
class GateOutput:
    """What :class:`BernoulliGate` returns: ``mask`` (hard 0/1 with a straight-through gradient, or
    ``alpha`` in ``mode="soft"``) and ``probs`` (``alpha``, what the KL reads)."""

    mask: torch.Tensor
    probs: torch.Tensor

    @property
    def open_ratio(self) -> torch.Tensor:
        """Share of gates open (mask > 0.5) over the batch and dimensions."""
        return (self.mask.detach() > 0.5).float().mean()


class BernoulliGate(nn.Module):
    """Hard Bernoulli gate with a straight-through estimator (BayesNCL, arXiv 2605.28441): a gate
    opens when its probability (in training, the sample :data:`GATE_TYPES` names) exceeds
    ``gate_threshold``; ``forward(logits, mode="soft")`` returns ``alpha`` as the mask."""

    def __init__(self, gate_type: str, gate_threshold: float, sigmoid_temperature: float):
        super().__init__()
        self.gate_type = resolve_gate_type(gate_type)
        self.gate_threshold = checked("gate_threshold", gate_threshold)
        self.sigmoid_temperature = checked("sigmoid_temperature", sigmoid_temperature)

    def forward(self, logits: torch.Tensor, mode: str = "hard") -> GateOutput:
        probs = gate_probabilities(logits.float(), self.sigmoid_temperature)
        if mode not in GATE_MODES:
            raise ValueError(
                f"gate mode={mode!r} is not supported; allowed values: {', '.join(GATE_MODES)}"
            )
        if mode == "soft":
            return GateOutput(mask=probs, probs=probs)
        if self.gate_type in _SAMPLERS and self.training:
            sample = _SAMPLERS[self.gate_type](logits.float(), self.sigmoid_temperature)
            return GateOutput(mask=hard_threshold_ste(sample, self.gate_threshold), probs=probs)
        return GateOutput(mask=hard_threshold_ste(probs, self.gate_threshold), probs=probs)

    def extra_repr(self) -> str:
        return (
            f"gate_type={self.gate_type!r}, gate_threshold={self.gate_threshold}, "
            f"sigmoid_temperature={self.sigmoid_temperature}"
        )
