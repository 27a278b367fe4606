"""``Trainer(sync_batchnorm=True)`` for strategy="ring": the methods of ``RingSyncBatchNorm``.

Lightning applies batch-norm synchronisation through a layer-sync plugin
(``LayerSync``: ``apply(model)`` before a fit, ``revert(model)`` after it).
Its default, ``TorchSyncBatchNorm``, converts to ``torch.nn.SyncBatchNorm``,
which needs a torch.distributed process group that a ring job does not
have. :class:`RingSyncBatchNormMixin` converts to
:class:`ring_strategy.torch.SyncBatchNorm` instead, whose statistics are
reduced over the ring; the strategy puts it in place of Lightning's default
(see ``RingStrategyMixin._ring_layer_sync``). Each Lightning package gets
its own ``RingSyncBatchNorm`` from this mixin and its ``LayerSync``
(:mod:`ring_strategy.lightning.strategy`,
:mod:`ring_strategy.lightning.lightning_pytorch`). Nothing here imports
Lightning.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from ring_strategy.environments.base import override
from ring_strategy.process_sets import global_process_set
from ring_strategy.torch.sync_batch_norm import SyncBatchNorm, revert_sync_batchnorm

if TYPE_CHECKING:  # what type checkers see as the base; at run time each package supplies its own
    from pytorch_lightning.plugins.layer_sync import LayerSync as _Base
else:
    _Base = object

__all__ = ["RingSyncBatchNormMixin"]


class RingSyncBatchNormMixin(_Base):
    """Converts a model's batch-norm layers to ring's SyncBatchNorm for a fit, and back after it.

    ``Trainer(strategy="ring", sync_batchnorm=True)`` uses it; passing
    ``Trainer(plugins=[RingSyncBatchNorm(process_set=...)])`` instead
    normalizes over the ranks of a process set. In a world of one the
    layers normalize locally, as batch norm does.

    Args:
        process_set: The ranks whose batches are normalized together; every
            rank by default.
    """

    def __init__(self, process_set: Any = global_process_set) -> None:
        super().__init__()
        self.process_set = process_set

    @override
    def apply(self, model: torch.nn.Module) -> torch.nn.Module:
        """Replaces every ``BatchNorm*d`` of ``model`` by a SyncBatchNorm holding the same tensors."""
        return SyncBatchNorm.convert_sync_batchnorm(model, process_set=self.process_set)

    @override
    def revert(self, model: torch.nn.Module) -> torch.nn.Module:
        """Turns the SyncBatchNorm layers back into the classes they replaced."""
        return revert_sync_batchnorm(model)
