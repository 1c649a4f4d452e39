"""A pretraining fit that a checkpoint saved within an epoch resumes as if never stopped: the
generators are seeded by position in the run (:func:`seed_position`), the data module skips the
batches the checkpoint trained (``continue_epoch``, :mod:`solo_bayesncl.data.pipelines`), and
the saved batch counters are completed. docs/resuming.md, "What a resumed run guarantees", says
what holds and what does not.
"""

from __future__ import annotations

import random
import warnings
from typing import Any

import numpy as np
import torch

from solo_bayesncl.training.auto_resume import ResumePoint, checkpoint_position

__all__ = ["resumable_fit", "seed_position"]


def seed_position(seed: int, epoch: int, batch: int, rank: int) -> None:
    """Seeds Python, NumPy and torch before batch ``batch`` of epoch ``epoch`` on global rank
    ``rank`` from the ``SeedSequence`` of the four, so a batch's draws depend on nothing before."""
    value = int(np.random.SeedSequence([seed, epoch, batch, rank]).generate_state(1)[0])
    random.seed(value)
    np.random.seed(value)
    torch.manual_seed(value)


def _complete_the_saved_batch(checkpoint: dict[str, Any], accumulate_grad_batches: int) -> None:
    """Marks the batch a checkpoint was saved after as completed, as its optimizer step is
    (Lightning 2.1 counts it only after ``on_train_batch_end``, where the checkpoint is saved)."""
    loops = (checkpoint.get("loops") or {}).get("fit_loop")
    if not loops:
        return
    epochs = loops["epoch_progress"]["current"]
    batches = loops["epoch_loop.batch_progress"]
    if epochs["ready"] <= epochs["processed"]:
        return  # the epoch's end
    if batches["current"]["completed"] != batches["current"]["processed"] - 1:
        return
    for part in ("current", "total"):
        batches[part]["completed"] = batches[part]["processed"]
    if batches["current"]["processed"] % accumulate_grad_batches == 0:  # the batch stepped
        loops["epoch_loop.state_dict"]["_batches_that_stepped"] += 1


def resumable_fit(seed: int):
    """The callback of a pretraining fit seeded with ``seed`` that resumes within an epoch."""
    from lightning.pytorch import Callback

    class ResumableFit(Callback):
        def __init__(self) -> None:
            self._continue_at: ResumePoint | None = None

        def on_load_checkpoint(self, trainer, pl_module, checkpoint: dict[str, Any]) -> None:
            resumed = checkpoint_position(checkpoint)
            self._continue_at = resumed if resumed.batch > 0 else None

        def on_fit_start(self, trainer, pl_module) -> None:
            point = self._continue_at
            if point is None:
                return
            continue_epoch = getattr(trainer.datamodule, "continue_epoch", None)
            if continue_epoch is not None:
                continue_epoch(point.epoch, point.batch)
                # Lightning's advice against resuming within an epoch answers what is done here
                warnings.filterwarnings("ignore", message="You're resuming from a checkpoint that")
            elif trainer.is_global_zero:
                data = type(trainer.datamodule).__name__
                print(
                    f"resuming within epoch {point.epoch}: this training data ({data}) cannot "
                    f"skip the {point.batch} batches the checkpoint trained, so the epoch's "
                    "remaining steps take the batches of its start",
                    flush=True,
                )

        def on_train_epoch_start(self, trainer, pl_module) -> None:
            point, self._continue_at = self._continue_at, None
            within = point is not None and point.epoch == trainer.current_epoch
            batch = point.batch if within else 0
            seed_position(seed, trainer.current_epoch, batch, trainer.global_rank)

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
            seed_position(seed, trainer.current_epoch, batch_idx + 1, trainer.global_rank)

        def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict[str, Any]) -> None:
            _complete_the_saved_batch(checkpoint, trainer.accumulate_grad_batches)

    return ResumableFit()
