"""A Lightning callback that computes the interpretability metrics (docs/method.md, "Metrics") on the
whole validation set every ``interpretability.frequency`` epochs, for any of the four methods.

Config (all optional)::

    interpretability:
      enabled: True        # off by default
      frequency: 5         # epochs between evaluations (the last epoch is always evaluated)
      gate: hard           # BayesNCL: hard (v) or soft (u * alpha)
      max_samples: null    # cap on the vectors kept for retrieval precision
      shuffle_permutations: 5

Metrics are logged as ``interp/<metric>`` to every logger (CSV and wandb).
"""

from __future__ import annotations

from typing import Any

import omegaconf
from lightning.pytorch import Callback, LightningModule, Trainer
from omegaconf import OmegaConf

from solo_bayesncl.core.gates import GATE_MODES
from solo_bayesncl.core.representations import extract_representations
from solo_bayesncl.core.validation import require_known_keys
from solo_bayesncl.metrics import InterpretabilityAccumulator

__all__ = ["InterpretabilityCallback", "build_interpretability_callback"]

_KEYS = {"enabled", "frequency", "gate", "max_samples", "shuffle_permutations", "retrieval"}


class InterpretabilityCallback(Callback):
    """Evaluates the interpretable representation on ``val_loader`` at the end of training epochs.

    Runs on the global-zero process only (the validation set is read whole there) and logs with
    ``rank_zero_only``.
    """

    def __init__(
        self,
        val_loader,
        num_classes: int,
        frequency: int = 1,
        gate: str = "hard",
        max_samples: int | None = None,
        shuffle_permutations: int = 5,
        retrieval: bool = True,
    ) -> None:
        super().__init__()
        self.val_loader = val_loader
        self.num_classes = num_classes
        self.frequency = frequency
        self.gate = gate
        self.max_samples = max_samples
        self.shuffle_permutations = shuffle_permutations
        self.retrieval = retrieval
        self.last_metrics: dict[str, float] = {}

    def evaluate(self, pl_module: LightningModule) -> dict[str, float]:
        """The metrics of the current model on the whole validation set."""
        accumulator = InterpretabilityAccumulator(
            self.num_classes,
            shuffle_permutations=self.shuffle_permutations,
            retrieval=self.retrieval,
            retrieval_max_samples=self.max_samples,
        )
        gate_open_sum, count = None, 0
        for batch in extract_representations(pl_module, self.val_loader, gate=self.gate):
            accumulator.update(batch.features, batch.labels)
            if batch.gate_open is not None:
                rates = batch.gate_open.float().sum(0)
                gate_open_sum = rates if gate_open_sum is None else gate_open_sum + rates
                count += batch.gate_open.shape[0]
        metrics = accumulator.compute()
        if gate_open_sum is not None:
            metrics["gate_open_ratio"] = float(
                gate_open_sum.sum() / (count * gate_open_sum.numel())
            )
            metrics["gates_never_open"] = float((gate_open_sum == 0).sum())
        return metrics

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        epoch = trainer.current_epoch
        last = trainer.max_epochs is not None and epoch + 1 >= trainer.max_epochs
        if trainer.sanity_checking or not (last or (epoch + 1) % self.frequency == 0):
            return
        if trainer.is_global_zero:
            self.last_metrics = self.evaluate(pl_module)
            pl_module.log_dict(
                {f"interp/{k}": float(v) for k, v in self.last_metrics.items()},
                rank_zero_only=True,
                on_epoch=True,
            )


def build_interpretability_callback(
    cfg: omegaconf.DictConfig, val_loader
) -> InterpretabilityCallback | None:
    """The callback configured by ``cfg.interpretability``, or None when it is off.

    Raises ``ValueError`` naming the key for unknown keys, a bad gate or frequency, or when it is
    switched on without labelled validation data.
    """
    require_known_keys(cfg, "interpretability", _KEYS)
    section: Any = OmegaConf.select(cfg, "interpretability", default=None) or {}
    if not section.get("enabled", False):
        return None
    frequency = section.get("frequency", 1)
    if not isinstance(frequency, int) or frequency < 1:
        raise ValueError(f"interpretability.frequency={frequency!r} must be a positive integer")
    gate = section.get("gate", "hard")
    if gate not in GATE_MODES:
        raise ValueError(
            f"interpretability.gate={gate!r} is not supported; allowed values: "
            f"{', '.join(GATE_MODES)}"
        )
    if val_loader is None:
        raise ValueError(
            "interpretability.enabled=True needs labelled validation data (data.val_path)"
        )
    return InterpretabilityCallback(
        val_loader,
        num_classes=int(cfg.data.num_classes),
        frequency=frequency,
        gate=gate,
        max_samples=section.get("max_samples", None),
        shuffle_permutations=int(section.get("shuffle_permutations", 5)),
        retrieval=bool(section.get("retrieval", True)),
    )
