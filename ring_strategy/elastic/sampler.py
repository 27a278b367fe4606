"""ElasticSampler: splits a dataset over the ranks of the current world and
remembers what this epoch has processed, so that after a reset the rest of
the epoch is split over the new world.

The split: the epoch's order (``range(len(dataset))``, shuffled with
``random.Random(seed + epoch)`` when ``shuffle``) less the processed
indices is padded by repeating its start until it divides by the number of
ranks; rank ``r`` takes every ``num_replicas``-th index from ``r``. Batch
``b`` of every rank is therefore one contiguous slice of that padded list,
which is what :meth:`ElasticSampler.record_batch` records: the same on
every rank, without communication.
"""

from __future__ import annotations

import math
import random
from typing import Any, Dict, Iterable, Iterator, List, Optional, Set

__all__ = ["ElasticSampler"]


class ElasticSampler:
    """Indices of this rank's share of the rest of the epoch.

    Record what was trained with :meth:`record_batch` (or
    :meth:`record_indices`) and keep the sampler in the elastic state; after a
    reset the indices not yet recorded are split over the new world. Start a
    new epoch with :meth:`set_epoch`, which forgets the processed indices.

    Args:
        dataset: Anything with ``len()``.
        shuffle: Shuffle the order of each epoch (the same on every rank).
        seed: The shuffle's seed; epoch ``e`` uses ``seed + e``.
        num_replicas: The number of ranks to split over; by default the
            current world's ``size()``, read again at every :meth:`reset`.
        rank: This rank's place in the split; by default ``rank()``.

    Example::

        sampler = ElasticSampler(dataset)
        loader = torch.utils.data.DataLoader(dataset, batch_size=32, sampler=sampler)
        for batch_idx, batch in enumerate(loader):
            ...
            sampler.record_batch(batch_idx, 32)
    """

    def __init__(self, dataset: Any, shuffle: bool = True, seed: int = 0, *,
                 num_replicas: Optional[int] = None, rank: Optional[int] = None) -> None:
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.processed_indices: Set[int] = set()
        self._world = (num_replicas, rank)
        self.num_replicas = 0
        self.rank = 0
        self.remaining_indices: List[int] = []
        self.indices: List[int] = []
        self.num_samples = 0
        self.total_size = 0
        self._padded: List[int] = []
        self.reset()

    def set_epoch(self, epoch: int) -> None:
        """Starts epoch ``epoch``: its order, and nothing processed yet."""
        self.epoch = epoch
        self.processed_indices = set()
        self.reset()

    def record_batch(self, batch_idx: int, batch_size: int) -> None:
        """Records batch ``batch_idx`` (of ``batch_size`` indices per rank) of
        every rank as processed; every rank must record the same batches."""
        start = batch_idx * batch_size
        stop = min(start + batch_size, self.num_samples)
        if stop > start:
            self.record_indices(self._padded[start * self.num_replicas: stop * self.num_replicas])

    def record_indices(self, indices: Iterable[int]) -> None:
        """Records ``indices`` as processed (on this rank only; a sync of the
        elastic state gathers every rank's)."""
        self.processed_indices.update(int(i) for i in indices)

    def get_indices(self, batch_idx: int, batch_size: int) -> List[int]:
        """This rank's indices of batch ``batch_idx``."""
        start = batch_idx * batch_size
        return self.indices[start:min(start + batch_size, len(self.indices))]

    def state_dict(self) -> Dict[str, Any]:
        """The epoch and the processed indices."""
        return {"epoch": self.epoch, "processed_indices": set(self.processed_indices)}

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """Takes the epoch and processed indices of :meth:`state_dict`, and
        splits the rest of the epoch over the current world."""
        self.epoch = state_dict["epoch"]
        self.processed_indices = set(state_dict["processed_indices"])
        self.reset()

    def reset(self) -> None:
        """Splits the epoch's unprocessed indices over the current world
        (``num_replicas`` and ``rank`` read again unless given)."""
        self.num_replicas, self.rank = self._current_world()
        order = list(range(len(self.dataset)))
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(order)
        self.remaining_indices = [i for i in order if i not in self.processed_indices]
        self.num_samples = math.ceil(len(self.remaining_indices) / self.num_replicas)
        self.total_size = self.num_samples * self.num_replicas
        pad = self.total_size - len(self.remaining_indices)
        self._padded = self.remaining_indices + [self.remaining_indices[i % len(self.remaining_indices)]
                                                 for i in range(pad)]
        self.indices = self._padded[self.rank:self.total_size:self.num_replicas]

    def _current_world(self) -> "tuple[int, int]":
        num_replicas, rank = self._world
        if num_replicas is None or rank is None:
            from ring_strategy import basics

            num_replicas = basics.size() if num_replicas is None else num_replicas
            rank = basics.rank() if rank is None else rank
        if not isinstance(num_replicas, int) or num_replicas < 1 or not isinstance(rank, int) \
                or not 0 <= rank < num_replicas:
            raise ValueError(f"ElasticSampler: rank should be in [0, num_replicas). Got: rank {rank!r}, "
                             f"num_replicas {num_replicas!r}")
        return num_replicas, rank

    def __iter__(self) -> Iterator[int]:
        return iter(list(self.indices))

    def __len__(self) -> int:
        return self.num_samples
