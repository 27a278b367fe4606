"""The training sampler of an elastic ``fit``: an ``ElasticSampler`` that
counts its epoch the way Lightning's training loop does.

Lightning counts the batches of an epoch from its start (``batch_idx``,
``num_training_batches``), also when ``fit`` resumes in the middle of one
from a commit. After a change of world the rest of the epoch is split
anew, so the batches still to come are not those of the old world. The
sampler therefore reports as its length the batches already trained this
epoch (in any world) plus the samples left for this rank, and yields only
the samples left: Lightning's count ends where the epoch's data does.
"""

from __future__ import annotations

from typing import Any, Dict, Iterator

from ring_strategy.torch.elastic.sampler import ElasticSampler

__all__ = ["FitSampler"]


class FitSampler(ElasticSampler):
    """This rank's share of the rest of the epoch, counted as Lightning counts it.

    Args:
        dataset: The training data set (anything with ``len()``).
        shuffle: Shuffle each epoch (the same order on every rank).
        seed: The shuffle's seed; epoch ``e`` uses ``seed + e``.
        batch_size: The training DataLoader's batch size.
    """

    def __init__(self, dataset: Any, shuffle: bool, seed: int, batch_size: int) -> None:
        self.batch_size = batch_size
        self.batches_done = 0  # batches of this epoch trained, in every world
        self._batches_before_split = 0
        self._batches_since_split = 0
        super().__init__(dataset, shuffle=shuffle, seed=seed)

    def set_epoch(self, epoch: int) -> None:
        """Starts epoch ``epoch``; the current one again (Lightning resuming it) keeps its progress."""
        if epoch != self.epoch:
            self.batches_done = 0
            super().set_epoch(epoch)

    def reset(self) -> None:
        super().reset()
        self._batches_before_split = self.batches_done
        self._batches_since_split = 0

    def record_next_batch(self) -> None:
        """Records the next batch of the current split as trained, on every rank."""
        self.record_batch(self._batches_since_split, self.batch_size)
        self._batches_since_split += 1
        self.batches_done += 1

    def state_dict(self) -> Dict[str, Any]:
        return {**super().state_dict(), "batches_done": self.batches_done}

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        self.batches_done = state_dict["batches_done"]
        super().load_state_dict(state_dict)

    def __iter__(self) -> Iterator[int]:
        if self._batches_since_split:
            self.reset()  # iterated again mid-epoch: only what is still to train
        return super().__iter__()

    def __len__(self) -> int:
        # In samples, so that len(DataLoader) is the batches trained before
        # this split plus this split's batches (with or without drop_last).
        return self._batches_before_split * self.batch_size + self.num_samples
