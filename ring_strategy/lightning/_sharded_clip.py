"""Lightning's gradient clipping (``Trainer(gradient_clip_val=...)``) on sharded optimizers.

Lightning clips between the backward passes and the optimizer step, through
its precision plugin's ``clip_grad_by_norm`` and ``clip_grad_by_value``, on
the tensors of the optimizer's param groups. A sharded optimizer's groups
hold this rank's blocks, whose gradients exist only once the step has
reduced them; :func:`clip_through_shards` sends both to the sharded
optimizer's own clipping instead (any other optimizer is clipped as before):

- by norm: ``ShardedOptimizer.clip_grad_norm_`` before the reduction, which
  averages the whole gradients and clips them as torch does, bitwise the
  unsharded strategy's result;
- by value: ``ShardedOptimizer.clip_grad_value_``, per element on the
  averaged blocks, bitwise as well.
"""

from __future__ import annotations

from typing import Any

from ring_strategy.torch.sharded_optimizer import ShardedOptimizer

__all__ = ["clip_through_shards"]

_MARK = "_ring_clips_through_shards"


def clip_through_shards(precision_plugin: Any) -> None:
    """Makes ``precision_plugin`` clip sharded optimizers' gradients across the
    shards (see the module docstring). Idempotent; other optimizers keep the
    plugin's own clipping."""
    if getattr(precision_plugin, _MARK, False):
        return
    by_norm, by_value = precision_plugin.clip_grad_by_norm, precision_plugin.clip_grad_by_value

    def clip_grad_by_norm(optimizer: Any, clip_val: float) -> None:
        if isinstance(optimizer, ShardedOptimizer):
            optimizer.clip_grad_norm_(float(clip_val))
        else:
            by_norm(optimizer, clip_val)

    def clip_grad_by_value(optimizer: Any, clip_val: float) -> None:
        if isinstance(optimizer, ShardedOptimizer):
            optimizer.clip_grad_value_(float(clip_val))
        else:
            by_value(optimizer, clip_val)

    precision_plugin.clip_grad_by_norm = clip_grad_by_norm
    precision_plugin.clip_grad_by_value = clip_grad_by_value
    setattr(precision_plugin, _MARK, True)
