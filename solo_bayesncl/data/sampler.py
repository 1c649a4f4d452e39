"""The pretraining loaders' sampler: each epoch's order depends on the seed and the epoch alone (a
``RandomSampler`` draws it from torch's global generator, so a resumed run's order would depend on
what was drawn before), and an epoch can start after the batches a checkpoint already trained."""

from __future__ import annotations

from collections.abc import Iterator, Sized

from torch.utils.data import DistributedSampler

__all__ = ["EpochSampler"]


class EpochSampler(DistributedSampler):
    """torch's ``DistributedSampler`` whose :meth:`continue_epoch` skips the samples a checkpoint
    already trained (the length stays the whole epoch's: Lightning counts those batches)."""

    def __init__(self, dataset: Sized, seed: int, num_replicas: int = 1, rank: int = 0) -> None:
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=True, seed=seed)
        self._continue: tuple[int, int] | None = None

    def continue_epoch(self, epoch: int, samples_done: int) -> None:
        """The next pass over ``epoch`` skips its first ``samples_done`` indices; also sets the
        epoch (a loader with workers fetches indices before Lightning's ``set_epoch``)."""
        if not 0 <= samples_done <= self.num_samples:
            raise ValueError(
                f"samples_done={samples_done} is outside this process's epoch of "
                f"{self.num_samples} samples"
            )
        self.set_epoch(epoch)
        self._continue = (epoch, samples_done)

    def __iter__(self) -> Iterator[int]:
        indices = list(super().__iter__())
        if self._continue is not None:
            epoch, skip = self._continue
            self._continue = None
            if epoch == self.epoch:
                indices = indices[skip:]
        return iter(indices)
