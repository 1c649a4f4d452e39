"""NCL: Non-negative Contrastive Learning (Wang et al., ICLR 2024, arXiv 2403.12459) for solo-learn:
InfoNCE on ``normalize(phi(z))``, SimCLR with a non-negativity map on the projector output. The
paper's NCL+TopK baseline keeps only the ``topk_k`` largest activations per sample."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from textwrap import indent
from typing import Any

import omegaconf
import torch
from solo.methods.base import BaseMethod

from solo_bayesncl.core.distributed import is_distributed
from solo_bayesncl.core.losses import LossTerms, NCLLoss
from solo_bayesncl.methods.heads import projector
from solo_bayesncl.methods.keys import NCLSettings, settings_table
from solo_bayesncl.metrics import EPS

__all__ = [
    "NCL",
    "NonFiniteTrainingError",
    "scheduled_dimension_dropout",
]

log = logging.getLogger(__name__)


def batch_feature_stats(v: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per-step active dimensions and sparsity of a representation batch (``|v_ij| > EPS``)."""
    active = v.detach().abs() > EPS
    return {
        "train_active_dims": active.any(dim=0).sum().float(),
        "train_sparsity": 1.0 - active.float().mean(),
    }


def scheduled_dimension_dropout(start: float, epochs: int, progress: float) -> float:
    """The dropout share after ``progress`` (fractional) epochs, falling linearly from ``start``
    to 0 over ``epochs`` epochs (``epochs=0``: ``start`` throughout)."""
    if epochs <= 0:
        return start
    return start * max(0.0, 1.0 - progress / epochs)


class NonFiniteTrainingError(FloatingPointError):
    """The projector output, the loss or the gradient of a training step is NaN or Inf."""


class NCL(BaseMethod):
    """Non-negative Contrastive Learning (arXiv 2403.12459): InfoNCE on ``normalize(phi(z))``.

    Its settings (:attr:`SETTINGS`, the table below) come parsed by the run's spec, else from
    ``cfg.method_kwargs``; :func:`scheduled_dimension_dropout` lowers ``dimension_dropout``."""

    SETTINGS: type[NCLSettings] = NCLSettings

    def __init__(self, cfg: omegaconf.DictConfig, settings: NCLSettings | None = None):
        super().__init__(cfg)
        # parsed once by the run's spec; a config built elsewhere (upstream's scripts, a
        # checkpoint of another layout) is parsed here, and a checkpoint older than a key gets
        # its default
        self.settings = settings or self.SETTINGS.from_kwargs(cfg.method_kwargs, cfg.optimizer)
        settings = self.settings
        self.non_neg: str = settings.non_neg
        self.projector = projector(
            self.features_dim, settings.proj_hidden_dim, settings.proj_output_dim
        )
        self.objective = self.build_objective()
        self.dimension_dropout: float = getattr(settings, "dimension_dropout", 0.0)
        self.dimension_dropout_epochs: int = getattr(settings, "dimension_dropout_epochs", 0)
        self._health: torch.Tensor | None = None

    def build_objective(self) -> NCLLoss:
        """The loss this method trains with (the config guarantees two views per image, so the
        per-step input check is off; a non-finite step stops training instead)."""
        return self.settings.objective(check_inputs=False)

    @property
    def learnable_params(self) -> list[dict[str, Any]]:
        """Backbone and classifier (from the parent) plus the projector."""
        return super().learnable_params + [
            {"name": "projector", "params": self.projector.parameters()}
        ]

    def forward(self, X: torch.Tensor) -> dict[str, Any]:
        """Backbone, online classifier and projector outputs: adds ``z``."""
        out = super().forward(X)
        out["z"] = self.projector(out["feats"])
        return out

    def multicrop_forward(self, X: torch.Tensor) -> dict[str, Any]:
        """Backbone and projector outputs of the small crops: adds ``z``."""
        out = super().multicrop_forward(X)
        out["z"] = self.projector(out["feats"])
        return out

    @property
    def top_k(self) -> int | None:
        """How many activations are kept per sample (``topk_k`` when ``use_topk``, else None)."""
        return self.settings.top_k

    def representation(self, out: dict[str, Any], gate: str = "hard") -> torch.Tensor:
        """The representation the metrics read: ``normalize(phi(z))`` (``gate`` is ignored)."""
        return self.objective.representation(out["z"])

    def contrastive_terms(self, out: dict[str, Any], indexes: torch.Tensor) -> LossTerms:
        """The objective of one step from the outputs of every crop (the hook BayesNCL
        overrides): InfoNCE on ``normalize(phi(z))``."""
        return self.objective.terms(torch.cat(out["z"]), indexes)

    def training_step(self, batch: Sequence[Any], batch_idx: int) -> torch.Tensor:
        """The objective over all crops plus the online classifier loss, every term logged."""
        out = super().training_step(batch, batch_idx)
        indexes = batch[0].repeat(self.num_large_crops + self.num_small_crops)
        scheduled = self.schedule_dimension_dropout(batch_idx)
        terms = self.contrastive_terms(out, indexes)
        loss = terms.loss + out["loss"]
        with torch.no_grad():
            stats = {
                "train_nce_loss": terms.nce,
                **terms.logged,
                **scheduled,
                "train_loss": loss,
                **batch_feature_stats(terms.representation),
            }
        self.log_dict(stats, on_epoch=True, sync_dist=True)
        self.record_health(torch.cat(out["z"]), loss)
        return loss

    def schedule_dimension_dropout(self, batch_idx: int) -> dict[str, float]:
        """With ``dimension_dropout_epochs``, sets the loss's dropout share for this step from the
        epochs trained (so a resumed run continues the schedule) and returns it to log."""
        if not self.dimension_dropout_epochs:
            return {}
        progress = self.current_epoch + batch_idx / max(1, self.trainer.num_training_batches)
        share = scheduled_dimension_dropout(
            self.dimension_dropout, self.dimension_dropout_epochs, progress
        )
        self.objective.dimension_dropout = share
        return {"train_dimension_dropout": share}

    def record_health(self, z: torch.Tensor, loss: torch.Tensor) -> None:
        """Queues, without reading anything back from the device, how many rows of ``z`` hold
        NaN/Inf and whether ``loss`` does; :meth:`on_before_optimizer_step` checks them."""
        with torch.no_grad():
            health = torch.stack(
                [
                    (~torch.isfinite(z)).any(dim=1).sum().float(),
                    torch.tensor(float(z.shape[0]), device=z.device),
                    (~torch.isfinite(loss)).float(),
                ]
            )
        self._health = health if self._health is None else self._health + health

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        """Stops training before the weights change when a step gave a non-finite ``z`` or loss,
        or (without a loss scaler, which skips such steps) gradient: one device read per optimizer
        step (under DDP after one all-reduce, so every process stops together)."""
        super().on_before_optimizer_step(optimizer)
        health, self._health = self._health, None
        if health is None:
            return
        if is_distributed():  # every process stops, or none does
            torch.distributed.all_reduce(health)
        trainer = self._trainer
        scaler = getattr(getattr(trainer, "precision_plugin", None), "scaler", None)
        grads = [p.grad for p in self.parameters() if p.grad is not None]
        if grads and scaler is None:
            grad_norm = torch.nn.utils.get_total_norm(grads).float().to(health.device)
        else:
            grad_norm = torch.zeros((), device=health.device)
        bad_rows, rows, bad_loss, norm = torch.cat([health, grad_norm.reshape(1)]).tolist()
        problems = []
        if bad_rows:
            problems.append(
                f"{int(bad_rows)} of {int(rows)} rows of z (projector output) hold NaN or Inf"
            )
        if bad_loss:
            problems.append("the loss is NaN or Inf")
        if not bad_loss and not torch.isfinite(torch.tensor(norm)):
            problems.append(f"the gradient norm is {norm}")
        if problems:
            where = (
                f"epoch {trainer.current_epoch}, step {trainer.global_step}"
                if trainer is not None
                else "a training step"
            )
            message = (
                f"training stopped at {where}: {'; '.join(problems)}. NaN/Inf do not recover; "
                "lower optimizer.lr, check the data, or resume from an earlier checkpoint"
            )
            log.error(message)
            raise NonFiniteTrainingError(message)


NCL.__doc__ = f"{NCL.__doc__}\n{indent(settings_table(NCLSettings), '    ')}\n"
