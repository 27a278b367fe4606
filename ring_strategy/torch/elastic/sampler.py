"""``ElasticSampler`` as a ``torch.utils.data.Sampler`` (the split and its
bookkeeping: ring_strategy/elastic/sampler.py)."""

from __future__ import annotations

import torch.utils.data

from ring_strategy.elastic import sampler as _core

__all__ = ["ElasticSampler"]


class ElasticSampler(_core.ElasticSampler, torch.utils.data.Sampler):
    """A ``torch.utils.data.Sampler`` over this rank's share of the rest of
    the epoch; see :class:`ring_strategy.elastic.sampler.ElasticSampler`.

    Args:
        dataset: The dataset (anything with ``len()``).
        shuffle: Shuffle the order of each epoch (the same on every rank).
        seed: The shuffle's seed; epoch ``e`` uses ``seed + e``.
        num_replicas: Ranks to split over; the world's ``size()`` by default.
        rank: This rank's place in the split; ``rank()`` by default.

    Example::

        sampler = hvd.elastic.ElasticSampler(dataset)
        loader = torch.utils.data.DataLoader(dataset, batch_size=32, sampler=sampler)
        state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0)
    """
