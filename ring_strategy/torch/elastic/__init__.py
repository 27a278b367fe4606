"""Elastic training with PyTorch, as ``horovod.torch.elastic``: the ``run``
decorator, ``TorchState`` (a model, an optimizer, samplers and plain values
kept in memory and rolled back together) and ``ElasticSampler``.

Example::

    import ring_strategy.torch as hvd

    @hvd.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, epochs):
            for state.batch, (x, y) in enumerate(loader):
                ...
                state.commit()

    train(hvd.elastic.TorchState(model, optimizer, epoch=0, batch=0))
"""

from ring_strategy.elastic.loop import run
from ring_strategy.elastic.state import ObjectState, State
from ring_strategy.torch.elastic.sampler import ElasticSampler
from ring_strategy.torch.elastic.state import TorchState

__all__ = ["run", "State", "ObjectState", "TorchState", "ElasticSampler"]
