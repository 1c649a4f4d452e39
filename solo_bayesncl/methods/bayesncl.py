"""BayesNCL: Bayesian Gated Non-Negative Contrastive Learning (Cui, Zhang & Hu, ICML 2026,
arXiv 2605.28441) for solo-learn.

On top of NCL, a gating head ``q`` reads the stop-gradient backbone features and opens or closes
every feature dimension per sample with a hard Bernoulli gate (straight-through gradient); a
Bernoulli(``rho``) prior on the gates enters the loss through a KL term (docs/method.md):

    L = InfoNCE(normalize(u * m)) + lambda * KL(alpha || rho) + L_online_classifier
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import omegaconf
import torch
from solo.utils.misc import omegaconf_select

from solo_bayesncl.core.gates import GATE_MODES, GateOutput, GatingHead, resolve_gate_type
from solo_bayesncl.core.losses import BayesNCLLoss, LossTerms
from solo_bayesncl.core.validation import (
    ConfigError,
    parse_bool,
    require_int,
    require_range,
    require_temperature,
)
from solo_bayesncl.methods.ncl import NCL, NCL_KWARGS

__all__ = ["BayesNCL"]

BAYESNCL_KWARGS: tuple[str, ...] = NCL_KWARGS + (
    "gate_type",
    "bayesian_prior_prob",
    "gate_threshold",
    "sigmoid_temperature",
    "bayesian_kl_lambda",
    "use_kl",
    "use_bayes",
    "kl_eps",
    "gating_head_hidden_dim",
    "eval_gate",
)
"""Every ``method_kwargs`` key BayesNCL reads; the entry points refuse any other key."""


class BayesNCL(NCL):
    """Bayesian Gated Non-Negative Contrastive Learning (arXiv 2605.28441).

    Extra cfg settings (``method_kwargs``), defaults from the official CIFAR-100 run:
        proj_hidden_dim, proj_output_dim, temperature, non_neg, use_topk, topk_k: as in NCL.
        gate_type (str): ``ste`` (straight-through hard gate, the paper's main variant),
            ``binary_concrete`` (logistic-noise sample, then the same threshold) or ``gumbel``
            (the official code's single-Gumbel sample); official ``STE`` and ``gumbel_sigmoid``
            (= ``gumbel``) accepted, see :data:`solo_bayesncl.core.gates.GATE_TYPES`.
        bayesian_prior_prob (float): ``rho`` in (0, 1), the prior open probability. 0.8.
        gate_threshold (float): ``t`` in (0, 1). 0.5.
        sigmoid_temperature (float): ``tau_g``, finite and >= 1e-4. 1.0.
        bayesian_kl_lambda (float): ``lambda`` >= 0 and finite, weight of the KL. 3e-5.
        use_kl (bool): add the KL term; False trains the gate by InfoNCE only. True.
        use_bayes (bool): the official flag, with the official meaning: False means no gate at
            all, so the run trains plain ``ncl`` (``cfg.method`` is switched, with a warning).
        kl_eps (float): clamp of ``alpha`` and ``rho`` in the KL, in (0, 0.5). 0.01.
        gating_head_hidden_dim (int): hidden width of the gating head; the projector's by default.
        eval_gate (str): representation read at evaluation, ``hard`` (``v``) or ``soft``
            (``normalize(u * alpha)``; zeroes nothing, so threshold metrics equal no gate).
    ``optimizer.gating_head_lr`` (finite float > 0): learning rate of the gating head's own parameter
    group (0.1), not rescaled by batch size.
    """

    METHOD_KWARGS: tuple[str, ...] = BAYESNCL_KWARGS

    def __init__(self, cfg: omegaconf.DictConfig):
        super().__init__(cfg)
        kwargs = cfg.method_kwargs
        self.eval_gate: str = kwargs.eval_gate
        self.gating_head_lr: float = cfg.optimizer.gating_head_lr
        self.gating_head = GatingHead(
            self.features_dim, kwargs.gating_head_hidden_dim, kwargs.proj_output_dim
        )
        self.gate = self.objective.gate

    def build_objective(self, cfg: omegaconf.DictConfig) -> BayesNCLLoss:
        """The BayesNCL objective with the run's gate, prior and KL weight (no KL with
        ``use_kl: False``)."""
        kwargs = cfg.method_kwargs
        return BayesNCLLoss(
            temperature=kwargs.temperature,
            non_neg=kwargs.non_neg,
            prior=kwargs.bayesian_prior_prob,
            kl_lambda=kwargs.bayesian_kl_lambda if kwargs.use_kl else 0.0,
            gate_type=kwargs.gate_type,
            threshold=kwargs.gate_threshold,
            gate_temperature=kwargs.sigmoid_temperature,
            kl_eps=kwargs.kl_eps,
            top_k=self.top_k,
            check_inputs=False,
        )

    @staticmethod
    def add_and_assert_specific_cfg(cfg: omegaconf.DictConfig) -> omegaconf.DictConfig:
        """Adds BayesNCL's defaults and checks its keys (see the class docstring)."""
        # NCL's shared checks only: its dimension_dropout is not a BayesNCL key
        cfg = NCL.check_ncl_kwargs(super(NCL, NCL).add_and_assert_specific_cfg(cfg))
        kw = "method_kwargs"
        kwargs = cfg.method_kwargs
        kwargs.use_bayes = parse_bool(
            f"{kw}.use_bayes", omegaconf_select(cfg, f"{kw}.use_bayes", True)
        )
        if not kwargs.use_bayes:
            # the official code builds no gating head when use_bayes is False: plain NCL
            warnings.warn(
                f"{kw}.use_bayes=False means no gate at all (the official meaning): training "
                f"method=ncl; to keep the gate and drop only the KL, set {kw}.use_kl=False",
                stacklevel=2,
            )
            cfg.method = "ncl"
            return cfg
        kwargs.gate_type = resolve_gate_type(
            omegaconf_select(cfg, f"{kw}.gate_type", "ste"), key=f"{kw}.gate_type"
        )
        kwargs.bayesian_prior_prob = require_range(
            f"{kw}.bayesian_prior_prob",
            omegaconf_select(cfg, f"{kw}.bayesian_prior_prob", 0.8),
            low=0.0,
            high=1.0,
        )
        kwargs.gate_threshold = require_range(
            f"{kw}.gate_threshold", omegaconf_select(cfg, f"{kw}.gate_threshold", 0.5), 0.0, 1.0
        )
        kwargs.sigmoid_temperature = require_temperature(
            f"{kw}.sigmoid_temperature", omegaconf_select(cfg, f"{kw}.sigmoid_temperature", 1.0)
        )
        kwargs.bayesian_kl_lambda = require_range(
            f"{kw}.bayesian_kl_lambda",
            omegaconf_select(cfg, f"{kw}.bayesian_kl_lambda", 3e-5),
            low=0.0,
            high=math.inf,
            low_inclusive=True,
        )
        kwargs.kl_eps = require_range(
            f"{kw}.kl_eps", omegaconf_select(cfg, f"{kw}.kl_eps", 0.01), 0.0, 0.5
        )
        kwargs.use_kl = parse_bool(f"{kw}.use_kl", omegaconf_select(cfg, f"{kw}.use_kl", True))
        kwargs.gating_head_hidden_dim = require_int(
            f"{kw}.gating_head_hidden_dim",
            omegaconf_select(cfg, f"{kw}.gating_head_hidden_dim", kwargs.proj_hidden_dim),
            low=1,
        )
        eval_gate = str(omegaconf_select(cfg, f"{kw}.eval_gate", "hard")).lower()
        if eval_gate not in GATE_MODES:
            raise ConfigError(
                f"{kw}.eval_gate={eval_gate!r} is not supported; allowed values: "
                f"{', '.join(GATE_MODES)}"
            )
        kwargs.eval_gate = eval_gate
        cfg.optimizer.gating_head_lr = require_range(
            "optimizer.gating_head_lr",
            omegaconf_select(cfg, "optimizer.gating_head_lr", 0.1),
            low=0.0,
            high=math.inf,
        )
        return cfg

    @property
    def learnable_params(self) -> list[dict[str, Any]]:
        """The parent's groups plus the gating head with its own learning rate."""
        return super().learnable_params + [
            {
                "name": "gating_head",
                "params": self.gating_head.parameters(),
                "lr": self.gating_head_lr,
            }
        ]

    def _add_gate_logits(self, out: dict[str, Any]) -> dict[str, Any]:
        # the gating head reads sg(feats): the gate (and so the KL) never pushes on the backbone
        out["gate_logits"] = self.gating_head(out["feats"])
        return out

    def forward(self, X: torch.Tensor) -> dict[str, Any]:
        """Adds ``z`` (projector) and ``gate_logits`` (gating head on ``sg(feats)``)."""
        return self._add_gate_logits(super().forward(X))

    def multicrop_forward(self, X: torch.Tensor) -> dict[str, Any]:
        """Adds ``z`` and ``gate_logits`` for the small crops."""
        return self._add_gate_logits(super().multicrop_forward(X))

    def gate_output(self, gate_logits: torch.Tensor, gate: str = "hard") -> GateOutput:
        """The gate mask and probabilities for ``gate`` = ``hard`` or ``soft``."""
        return self.gate(gate_logits, mode=gate)

    def representation(self, out: dict[str, Any], gate: str | None = None) -> torch.Tensor:
        """``v = normalize(u * m)`` (hard gate) or ``normalize(u * alpha)`` (soft gate).

        ``gate`` defaults to ``method_kwargs.eval_gate``.
        """
        return self.objective.gated(
            out["z"], self.gate_output(out["gate_logits"], gate or self.eval_gate)
        )

    def contrastive_terms(self, out: dict[str, Any], indexes: torch.Tensor) -> LossTerms:
        """InfoNCE on the gated representation + lambda * KL, from the outputs of every crop."""
        return self.objective.terms(torch.cat(out["z"]), torch.cat(out["gate_logits"]), indexes)
