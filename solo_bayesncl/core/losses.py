"""The objectives of NCL and BayesNCL, as the papers write them (docs/method.md, "The objective").

With ``z`` the projector output of every view, ``phi`` the non-negativity map and ``m`` the gate::

    u = phi(z) / ||phi(z)||                        NCL, Wang et al., arXiv 2403.12459
    v = (u * m) / ||u * m||                        BayesNCL, Cui, Zhang & Hu, arXiv 2605.28441, sec. 3
    L_NCL      = InfoNCE_T(u)
    L_BayesNCL = InfoNCE_T(v) + lambda * KL(alpha || rho)

InfoNCE is SimCLR's NT-Xent (Chen et al., 2020); the gate and its KL are in
:mod:`solo_bayesncl.core.gates`. Arguments are checked against
:mod:`solo_bayesncl.core.hyperparameters`; defaults are in :mod:`solo_bayesncl.methods.keys`."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from solo_bayesncl.core.distributed import gather_no_grad, gather_with_grad, rank
from solo_bayesncl.core.gates import BernoulliGate, GateOutput, bernoulli_kl
from solo_bayesncl.core.hyperparameters import checked
from solo_bayesncl.core.loss_inputs import check_contrast, check_unit_rows, norm_tolerance
from solo_bayesncl.core.nonneg import non_negative, resolve_non_neg

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
    """``x / ||x||`` along the last dim; an all-zero row stays zero with zero gradient (where
    ``F.normalize``'s ``1 / eps`` would overflow fp16); a NaN or Inf row comes out NaN."""
    norm = torch.linalg.vector_norm(x, dim=-1, keepdim=True)
    return (x / norm.clamp_min(eps)).masked_fill(norm == 0, 0.0)


def keep_top_k(z: torch.Tensor, k: int) -> torch.Tensor:
    """Keeps the ``k`` largest entries of every row (ties as ``torch.topk``), zeroes the others."""
    k = checked("topk_k", k, key="k")
    if k >= z.shape[-1]:
        return z
    keep = torch.zeros_like(z).scatter_(-1, torch.topk(z, k, dim=-1).indices, 1.0)
    return z * keep


def non_negative_representation(z: torch.Tensor, non_neg: str, top_k: int | None) -> torch.Tensor:
    """``u = phi(z) / ||phi(z)||`` in float32 (NCL, arXiv 2403.12459); with ``top_k`` only the
    ``top_k`` largest entries of ``phi(z)`` are kept (NCL+TopK, arXiv 2605.28441). For ``exp`` the
    row maximum is subtracted first (``normalize(exp(z - c)) = normalize(exp(z))``), else ``exp``
    overflows float32."""
    if top_k is not None:
        top_k = checked("topk_k", top_k, key="top_k")
    z = z.float()
    if resolve_non_neg(non_neg) == "exp":
        z = z - z.detach().amax(dim=-1, keepdim=True)
    z_pos = non_negative(z, non_neg)
    return normalize_rows(z_pos if top_k is None else keep_top_k(z_pos, top_k))


def gated_representation(
    z: torch.Tensor, mask: torch.Tensor, non_neg: str, top_k: int | None
) -> torch.Tensor:
    """``v = (u * m) / ||u * m||`` with ``u = normalize(phi(z))`` (arXiv 2605.28441, section 3);
    ``mask`` broadcasts to ``z``. A sample whose gates are all closed gives ``v = 0``."""
    return normalize_rows(non_negative_representation(z, non_neg, top_k) * mask.float())


def info_nce_loss(
    v: torch.Tensor,
    indexes: torch.Tensor,
    temperature: float,
    gather_distributed: bool = True,
    check_inputs: bool = True,
) -> torch.Tensor:
    """InfoNCE / NT-Xent over all views of the (global) batch, in log-sum-exp form.

    For every row ``i``: ``-log( sum_{j in P(i)} e^{s_ij / T} / sum_{j != i} e^{s_ij / T} )`` with
    ``s_ij = v_i . v_j``, ``P(i)`` the other views of the same image (same value in ``indexes``);
    the loss is the mean over rows. With one positive per row this is SimCLR's loss (NT-Xent, Chen
    et al., arXiv 2002.05709, eq. 1). Computed in float32 with autocast disabled. ``check_inputs``
    refuses non-finite, unnormalised or positive-less rows (two device reads: off in training)."""
    temperature = check_contrast(v, indexes, temperature)
    tolerance = norm_tolerance(v.dtype)  # the precision the rows were normalised at
    with torch.autocast(device_type=v.device.type, enabled=False):
        v = v.float()
        all_v = gather_with_grad(v) if gather_distributed else v
        all_idx = gather_no_grad(indexes) if gather_distributed else indexes
        different = indexes[:, None] != all_idx[None, :]  # row j is another image than row i
        if check_inputs:
            check_unit_rows(v, different, tolerance)
        offset = v.shape[0] * rank() if gather_distributed else 0  # row 0's column
        logits = v @ all_v.T / temperature
        lowest = torch.finfo(logits.dtype).min
        own = torch.zeros_like(different)
        own.diagonal(offset).fill_(True)  # row i is column i + offset of the gathered batch
        logits = logits.masked_fill(own, lowest)  # j != i
        log_den = torch.logsumexp(logits, dim=1)
        log_num = torch.logsumexp(logits.masked_fill(different, lowest), dim=1)  # j in P(i)
        return (log_den - log_num).mean()


@dataclass
class LossTerms:
    """The parts of an objective's value for a training step to log: the loss, its InfoNCE term, the
    representation it compared (``u`` or ``v``), further terms under their log names."""

    loss: torch.Tensor
    nce: torch.Tensor
    representation: torch.Tensor
    logged: dict[str, torch.Tensor] = field(default_factory=dict)


class NCLLoss(nn.Module):
    """InfoNCE on ``u = normalize(phi(z))`` (NCL, Wang et al., arXiv 2403.12459), built with checked
    settings by :class:`solo_bayesncl.methods.keys.NCLSettings`. ``dimension_dropout``: in
    training each entry of ``u`` is kept with probability ``1 - p`` (a random gate, the control for
    BayesNCL's). ``forward(z, indexes)``: every view's projector outputs, each row's image."""

    def __init__(
        self,
        temperature: float,
        non_neg: str,
        top_k: int | None,
        dimension_dropout: float,
        gather_distributed: bool = True,
        check_inputs: bool = True,
    ) -> None:
        super().__init__()
        self.temperature = checked("temperature", temperature)
        self.non_neg = resolve_non_neg(non_neg)
        self.top_k = None if top_k is None else checked("topk_k", top_k, key="top_k")
        self.dimension_dropout = checked("dimension_dropout", dimension_dropout)
        self.gather_distributed = bool(gather_distributed)
        self.check_inputs = bool(check_inputs)

    def representation(self, z: torch.Tensor) -> torch.Tensor:
        """``u = normalize(phi(z))``: :func:`non_negative_representation`."""
        return non_negative_representation(z, self.non_neg, self.top_k)

    def masked(self, z: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``v = normalize(u * m)``: :func:`gated_representation`."""
        return gated_representation(z, mask, self.non_neg, self.top_k)

    def contrast(self, v: torch.Tensor, indexes: torch.Tensor) -> torch.Tensor:
        """InfoNCE of a representation: :func:`info_nce_loss` with this loss's settings."""
        return info_nce_loss(
            v, indexes, self.temperature, self.gather_distributed, self.check_inputs
        )

    def dropout_mask(self, z: torch.Tensor) -> torch.Tensor | None:
        """The mask of ``dimension_dropout`` for the rows of ``z`` (torch's global generator): in
        training with ``p > 0``, True where an entry is kept; None otherwise."""
        if not self.training or self.dimension_dropout == 0.0:
            return None
        return torch.rand(z.shape, device=z.device) >= self.dimension_dropout

    def terms(self, z: torch.Tensor, indexes: torch.Tensor) -> LossTerms:
        """The loss with the representation it compared: ``u``, or in training with
        ``dimension_dropout`` the randomly masked ``v = normalize(u * m)``."""
        mask = self.dropout_mask(z)
        v = self.representation(z) if mask is None else self.masked(z, mask)
        nce = self.contrast(v, indexes)
        kept = {} if mask is None else {"train_dimension_kept_ratio": mask.float().mean()}
        return LossTerms(loss=nce, nce=nce, representation=v, logged=kept)

    def forward(self, z: torch.Tensor, indexes: torch.Tensor) -> torch.Tensor:
        return self.terms(z, indexes).loss

    def extra_repr(self) -> str:
        dropout = f", dimension_dropout={self.dimension_dropout}" if self.dimension_dropout else ""
        return (
            f"temperature={self.temperature}, non_neg={self.non_neg!r}, top_k={self.top_k}{dropout}"
        )


class BayesNCLLoss(NCLLoss):
    """InfoNCE on the gated ``v = normalize(u * m)`` plus ``lambda * KL(q(m) || Bernoulli(rho))``
    (BayesNCL, Cui, Zhang & Hu, arXiv 2605.28441, section 3; docs/method.md, "The objective"), built
    with checked settings by :class:`solo_bayesncl.methods.keys.BayesNCLSettings`.

    ``bayesian_prior_prob`` is ``rho``, ``bayesian_kl_lambda`` ``lambda`` (0 without ``use_kl``).
    ``forward(z, gate_logits, indexes)``: the gating head's outputs for the rows of ``z``."""

    def __init__(
        self,
        temperature: float,
        non_neg: str,
        top_k: int | None,
        *,
        bayesian_prior_prob: float,
        bayesian_kl_lambda: float,
        use_kl: bool,
        gate_type: str,
        gate_threshold: float,
        sigmoid_temperature: float,
        kl_eps: float,
        gather_distributed: bool = True,
        check_inputs: bool = True,
    ) -> None:
        super().__init__(temperature, non_neg, top_k, 0.0, gather_distributed, check_inputs)
        self.bayesian_prior_prob = checked("bayesian_prior_prob", bayesian_prior_prob)
        self.bayesian_kl_lambda = checked("bayesian_kl_lambda", bayesian_kl_lambda)
        self.use_kl = checked("use_kl", use_kl)
        self.kl_eps = checked("kl_eps", kl_eps)
        self.gate = BernoulliGate(gate_type, gate_threshold, sigmoid_temperature)

    def gated(self, z: torch.Tensor, gate: GateOutput) -> torch.Tensor:
        """``v = normalize(u * m)`` for a gate's mask (:func:`gated_representation`)."""
        return self.masked(z, gate.mask)

    def kl(self, probs: torch.Tensor) -> torch.Tensor:
        """``KL(alpha || rho)`` with this loss's prior and clamp (``gates.bernoulli_kl``)."""
        return bernoulli_kl(probs, self.bayesian_prior_prob, self.kl_eps, self.check_inputs)

    def terms(self, z: torch.Tensor, gate_logits: torch.Tensor, indexes: torch.Tensor) -> LossTerms:
        """The loss with its InfoNCE and KL terms, the gated representation and gate statistics."""
        gate = self.gate(gate_logits, mode="hard")
        v = self.gated(z, gate)
        nce = self.contrast(v, indexes)
        kl = self.kl(gate.probs)
        weight = self.bayesian_kl_lambda if self.use_kl else 0.0
        return LossTerms(
            loss=nce + weight * kl,
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
        return (
            f"{super().extra_repr()}, bayesian_prior_prob={self.bayesian_prior_prob}, "
            f"bayesian_kl_lambda={self.bayesian_kl_lambda}, use_kl={self.use_kl}"
        )
