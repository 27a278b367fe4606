"""shard: each rank's part of the training data."""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

import keras

from keras_callbacks._util import check_int
from ring_strategy.basics import rank as _rank
from ring_strategy.basics import size as _size
from ring_strategy.exceptions import BadArgumentError


class _PyDatasetShard(keras.utils.PyDataset):
    """Batches ``rank, rank + size, ...`` of another PyDataset."""

    def __init__(self, dataset: keras.utils.PyDataset, rank: int, size: int):
        super().__init__(workers=getattr(dataset, "workers", 1),
                         use_multiprocessing=getattr(dataset, "use_multiprocessing", False),
                         max_queue_size=getattr(dataset, "max_queue_size", 10))
        self.dataset, self.rank, self.size = dataset, rank, size

    def __len__(self) -> int:
        return len(self.dataset) // self.size

    def __getitem__(self, index: int) -> Any:
        return self.dataset[index * self.size + self.rank]

    def on_epoch_end(self) -> None:
        self.dataset.on_epoch_end()


def shard(data: Any, rank: Optional[int] = None, size: Optional[int] = None) -> Any:
    """Returns this rank's shard of ``data``; every rank gets the same amount.

    - numpy arrays (or a tuple, list or dict of them, sharded alike): rows
      ``rank, rank + size, ...``. With batch size ``b`` per rank, step ``i``
      of the job then covers exactly rows ``[i*b*size, (i+1)*b*size)``: the
      same global batch a single process would see with batch size ``b*size``.
      Rows beyond the largest multiple of ``size`` are dropped.
    - ``tf.data.Dataset``: ``dataset.shard(size, rank)`` (elements
      ``rank, rank + size, ...``); shard before batching.
    - ``keras.utils.PyDataset``: batches ``rank, rank + size, ...``; the
      remainder of ``len(dataset) / size`` batches is dropped.

    Args:
        data: what to shard.
        rank: the shard to return; ``rank()`` by default.
        size: the number of shards; ``size()`` by default.

    Example::

        import numpy as np, keras_callbacks as hvd
        hvd.init()
        x, y = hvd.shard((np.arange(10.0), np.arange(10.0)))
    """
    size = _size() if size is None else check_int("size", size, minimum=1)
    rank = _rank() if rank is None else check_int("rank", rank)
    if rank >= size:
        raise BadArgumentError(f"rank should be lower than size ({size}). Got: {rank!r}")
    if isinstance(data, keras.utils.PyDataset):
        return _PyDatasetShard(data, rank, size)
    if type(data).__module__.startswith("tensorflow") and hasattr(data, "shard"):
        return data.shard(size, rank)
    if isinstance(data, (tuple, list)):
        return type(data)(shard(d, rank, size) for d in data)
    if isinstance(data, dict):
        return {k: shard(v, rank, size) for k, v in data.items()}
    if isinstance(data, np.ndarray) or hasattr(data, "__array__"):
        arr = np.asarray(data)
        if arr.ndim == 0:
            raise BadArgumentError(f"data should have a first dimension to shard. Got a scalar: {arr!r}")
        usable = arr.shape[0] - arr.shape[0] % size
        return arr[rank:usable:size]
    raise BadArgumentError(
        f"data should be numpy arrays, a tf.data.Dataset or a keras.utils.PyDataset. Got: {type(data).__name__!r}"
    )
