"""The torch DistributedOptimizer's ``op=Adasum`` rule: reduce the change
each rank's own optimizer step makes, not the gradients.

When a parameter's gradient is due (the same hooks and accumulation as the
gradient path, :class:`~ring_strategy.torch.grad_sync.GradientSync`), this
rank steps the wrapped optimizer on that parameter alone, with its local
gradient and its own optimizer state, turns the parameter into the change
``delta = new - old`` and starts an in-place Adasum allreduce of it
(docs/adasum.md). Finishing sets the parameter to ``old + adasum(delta)``.
Each parameter is its own tensor of the Adasum, so its coefficients come
from its own dot product and norms, however the engine fuses them.

Until the optimizer's ``step()`` (or ``synchronize()``) finishes the
reductions, a parameter whose reduction has started holds its delta.
"""

from __future__ import annotations

from typing import Any, Callable, List, Sequence

import torch

from ring_strategy.torch.mpi_ops import Adasum, grouped_allreduce_async_, synchronize

__all__ = ["DeltaReducer"]


class DeltaReducer:
    """Takes the place of the gradient reducer of a GradientSync for Adasum.

    Args:
        optimizer: Returns the distributed optimizer (or None once it is gone).
        local_step: Runs the wrapped optimizer's own ``step()`` on it.
        compression: The dtype the deltas travel in.
        process_set: The ranks that reduce.
    """

    def __init__(self, optimizer: Callable[[], Any], local_step: Callable[[Any], Any], compression: Any,
                 process_set: Any) -> None:
        self._optimizer = optimizer
        self._local_step = local_step
        self.compression = compression
        self.process_set = process_set

    def _step_only(self, params: Sequence[torch.Tensor]) -> List[torch.Tensor]:
        """Steps the optimizer on ``params`` alone, leaves each one's change in
        it and returns the values from before."""
        opt = self._optimizer()
        starts = [p.detach().clone() for p in params]
        chosen = {id(p) for p in params}
        stashed = [group["params"] for group in opt.param_groups]
        try:
            for group in opt.param_groups:
                group["params"] = [p for p in group["params"] if id(p) in chosen]
            self._local_step(opt)
        finally:
            for group, kept in zip(opt.param_groups, stashed):
                group["params"] = kept
        with torch.no_grad():
            for p, start in zip(params, starts):
                p.sub_(start)
        return starts

    def one(self, p: torch.Tensor, name: str) -> Callable[[], None]:
        return self.group((p,), [name])

    def group(self, group: Sequence[torch.Tensor], names: Sequence[str]) -> Callable[[], None]:
        starts = self._step_only(group)
        compressed, ctxs = zip(*[self.compression.compress(p.data) for p in group])
        handle = grouped_allreduce_async_(list(compressed), name=names[0], op=Adasum, process_set=self.process_set)

        def finish() -> None:
            outputs = synchronize(handle)
            with torch.no_grad():
                for p, start, output, ctx in zip(group, starts, outputs, ctxs):
                    p.copy_(start.add_(self.compression.decompress(output, ctx)))

        return finish
