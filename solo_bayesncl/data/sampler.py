"""The pretraining loaders' sampler: each epoch's order depends on the seed and the epoch alone,
and an epoch can start after the batches a checkpoint already trained.

Shuffling with a ``RandomSampler`` draws the order from torch's global generator when the
epoch's iterator starts, so the order of a resumed run depends on what was drawn before (the
restore, the sanity check, the loader's own seed). :class:`EpochSampler` is torch's
``DistributedSampler`` (a permutation from its own generator seeded with ``seed + epoch``, split
over the processes of a job; Lightning keeps a ``DistributedSampler`` as it is), with one
addition: :meth:`EpochSampler.continue_epoch` makes the next pass over an epoch skip the samples
this process already trained, which is what a checkpoint saved within an epoch needs.
"""

from __future__ import annotations

from collections.abc import Iterator, Sized

from torch.utils.data import DistributedSampler

__all__ = ["EpochSampler"]


class EpochSampler(DistributedSampler):
    """Shuffled indices of ``dataset`` for one process of ``num_replicas`` (``rank``): the order
    of epoch ``e`` is a function of ``seed`` and ``e`` only (Lightning calls ``set_epoch``).

    ``continue_epoch(epoch, samples_done)`` makes the next pass over ``epoch`` start at its
    ``samples_done``-th index (this process's share); the length stays the whole epoch's, as
    Lightning counts the batches already trained itself. It holds for one pass; any later pass
    over an epoch starts at the beginning.
    """

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
