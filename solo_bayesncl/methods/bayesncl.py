"""BayesNCL: Bayesian Gated Non-Negative Contrastive Learning (Cui, Zhang & Hu, ICML 2026,
arXiv 2605.28441) for solo-learn.

On top of NCL, a gating head ``q`` reads the stop-gradient backbone features and opens or closes
every feature dimension per sample with a hard Bernoulli gate (straight-through gradient); a
Bernoulli(``rho``) prior on the gates enters the loss through a KL term (docs/method.md):

    L = InfoNCE(normalize(u * m)) + lambda * KL(alpha || rho) + L_online_classifier
"""

from __future__ import annotations

from textwrap import indent
from typing import Any

import omegaconf
import torch

from solo_bayesncl.core.gates import GateOutput, GatingHead
from solo_bayesncl.core.losses import LossTerms
from solo_bayesncl.methods.keys import BayesNCLSettings, settings_table
from solo_bayesncl.methods.ncl import NCL

__all__ = ["BayesNCL"]


class BayesNCL(NCL):
    """Bayesian Gated Non-Negative Contrastive Learning (arXiv 2605.28441), settings as in
    :class:`~solo_bayesncl.methods.ncl.NCL` (table below); ``use_bayes: False`` trains ``ncl``."""

    SETTINGS: type[BayesNCLSettings] = BayesNCLSettings

    def __init__(self, cfg: omegaconf.DictConfig, settings: BayesNCLSettings | None = None):
        super().__init__(cfg, settings)
        settings = self.settings
        self.eval_gate: str = settings.eval_gate
        self.gating_head_lr: float = settings.gating_head_lr
        self.gating_head = GatingHead(
            self.features_dim, settings.gating_head_hidden_dim, settings.proj_output_dim
        )
        self.gate = self.objective.gate

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
        """``normalize(u * m)`` (hard) or ``normalize(u * alpha)`` (soft; default ``eval_gate``)."""
        return self.objective.gated(
            out["z"], self.gate_output(out["gate_logits"], gate or self.eval_gate)
        )

    def contrastive_terms(self, out: dict[str, Any], indexes: torch.Tensor) -> LossTerms:
        """InfoNCE on the gated representation + lambda * KL, from the outputs of every crop."""
        return self.objective.terms(torch.cat(out["z"]), torch.cat(out["gate_logits"]), indexes)


BayesNCL.__doc__ = f"{BayesNCL.__doc__}\n{indent(settings_table(BayesNCLSettings), '    ')}\n"
