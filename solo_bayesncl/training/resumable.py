"""A pretraining fit that a checkpoint saved within an epoch resumes as if never stopped.

Three things make a resumed fit train what the uninterrupted one would have trained:

- **Randomness by position.** Python's, NumPy's and torch's generators are seeded when an epoch
  starts and after every batch, from the run's seed, the epoch, the batch about to be drawn and
  the global rank (:func:`position_seed`). Whatever a batch draws (its augmentations on the
  batched path or, without loader workers, on the per-image path; the BayesNCL gate's noise)
  then depends on where it is in the run, not on what ran before it in this process.
- **The data continue.** The data module's sampler skips the batches of the epoch that the
  checkpoint already trained (``continue_epoch``, :mod:`solo_bayesncl.data.pipelines`);
  without it Lightning 2.1 would run the epoch's remaining steps on the batches of its start.
- **Lightning's counters.** A checkpoint saved from ``on_train_batch_end`` (the interval
  checkpoint) holds the batch as not yet completed, so Lightning 2.1 would train it a second
  time; the saved counters are completed here (:func:`_complete_the_saved_batch`).

With loader workers (``data.num_workers`` > 0 on the per-image path) the workers draw the
augmentations from generators of their own, which a checkpoint does not hold: a run resumed
within an epoch then trains the same images with other draws. DALI's pipeline cannot start an
epoch part-way: the epoch's remaining steps take the batches of its start (a message says so).
"""

from __future__ import annotations

import random
import warnings
from typing import Any

import numpy as np
import torch

from solo_bayesncl.training.auto_resume import ResumePoint, checkpoint_position

__all__ = ["position_seed", "resumable_fit", "seed_position"]


def position_seed(seed: int, epoch: int, batch: int, rank: int) -> int:
    """The seed of the generators before batch ``batch`` of epoch ``epoch`` on global rank
    ``rank`` of a run seeded with ``seed``: NumPy's ``SeedSequence`` of the four, so that no two
    positions or ranks share a stream."""
    return int(np.random.SeedSequence([seed, epoch, batch, rank]).generate_state(1)[0])


def seed_position(seed: int, epoch: int, batch: int, rank: int) -> None:
    """Seeds Python, NumPy and torch (every device) with :func:`position_seed`."""
    value = position_seed(seed, epoch, batch, rank)
    random.seed(value)
    np.random.seed(value)
    torch.manual_seed(value)


def _complete_the_saved_batch(checkpoint: dict[str, Any], accumulate_grad_batches: int) -> None:
    """Marks the batch a checkpoint was saved after as completed, as its optimizer step is.

    Lightning 2.1 increments the batch's ``completed`` count and the logger's step count only
    after ``on_train_batch_end``, where a checkpoint within an epoch is saved; resumed from it,
    the batch would be trained again. Nothing changes when the counts already agree (a version
    of Lightning that counts first) or the checkpoint is of an epoch's end.
    """
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
    """The callback of a pretraining fit that resumes within an epoch (see the module
    docstring). Its ``resumed`` is the :class:`~solo_bayesncl.training.auto_resume.ResumePoint`
    the fit continued from (None for a new run) and ``saved`` the newest checkpoint this fit
    saved (None before the first one)."""
    from lightning.pytorch import Callback

    class ResumableFit(Callback):
        def __init__(self) -> None:
            self.seed = seed
            self.resumed: ResumePoint | None = None
            self.saved: ResumePoint | None = None
            self._continue_at: ResumePoint | None = None

        def on_load_checkpoint(self, trainer, pl_module, checkpoint: dict[str, Any]) -> None:
            self.resumed = checkpoint_position(checkpoint)
            self._continue_at = self.resumed if self.resumed.batch > 0 else None

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
            seed_position(self.seed, trainer.current_epoch, batch, trainer.global_rank)

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
            seed_position(self.seed, trainer.current_epoch, batch_idx + 1, trainer.global_rank)

        def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict[str, Any]) -> None:
            _complete_the_saved_batch(checkpoint, trainer.accumulate_grad_batches)
            self.saved = checkpoint_position(checkpoint)

    return ResumableFit()
