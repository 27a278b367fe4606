"""Data-parallel training for MXNet, as in Horovod: gradients are summed
over all ranks before each update, and the sum is divided by ``size()``
through the optimizer's ``rescale_grad``, so every rank applies the average
gradient of the global batch.

- :class:`DistributedTrainer`, a ``gluon.Trainer`` for Gluon scripts.
- :class:`DistributedOptimizer`, an ``mx.optimizer.Optimizer`` wrapper for
  the Module API (``module.fit(optimizer=...)``) or a plain ``gluon.Trainer``.

``gradient_predivide_factor`` splits the averaging: gradients are scaled by
``1 / gradient_predivide_factor`` before the sum and by
``gradient_predivide_factor / size()`` after it. ``num_groups`` is accepted
for compatibility: every gradient of a step is submitted at once, so the
engine fuses them as its fusion threshold allows.
"""

from __future__ import annotations

import warnings
from typing import Any, Optional, Sequence

import mxnet as mx

from ring_strategy import ops as _np
from ring_strategy._core.rules import Sum
from ring_strategy.basics import size
from ring_strategy.exceptions import BadArgumentError
from ring_strategy.mxnet.compression import Compression
from ring_strategy.mxnet.mpi_ops import _host

__all__ = ["DistributedOptimizer", "DistributedTrainer"]


def _predivide(factor: Any) -> float:
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not factor > 0:
        raise BadArgumentError(f"gradient_predivide_factor should be a positive number. Got: {factor!r}")
    return float(factor)


def _sum_in_place(grads: Sequence[mx.nd.NDArray], names: Sequence[str], predivide: float,
                  compression: Any = Compression.none) -> None:
    """Replaces each gradient by its sum over all ranks (each scaled by
    ``1 / predivide`` first). Every reduction is submitted before the first
    is waited for, so the engine may fuse them."""
    pending = []
    for grad, name in zip(grads, names):
        wire, ctx = compression.compress(grad)
        pending.append((grad, wire, ctx, _np.allreduce_async(_host(wire, "gradient"), Sum, name, 1.0 / predivide)))
    for grad, wire, ctx, handle in pending:
        wire[:] = _np.synchronize(handle)
        grad[:] = compression.decompress(wire, ctx)


class DistributedOptimizer(mx.optimizer.Optimizer):
    """Wraps ``optimizer`` so that each update applies the gradient averaged over all ranks.

    Every attribute other than the wrapper's own is read from and written to
    the wrapped optimizer (``rescale_grad``, ``lr``, ``param_dict``, ...),
    so a ``gluon.Trainer`` may drive it. Its ``rescale_grad`` is multiplied
    by ``gradient_predivide_factor / size()`` once, here.

    Args:
        optimizer: the optimizer to wrap (the same kind on every rank).
        gradient_predivide_factor: see the module's docstring.
        num_groups: accepted for compatibility; no effect.

    Example::

        opt = hvd.DistributedOptimizer(mx.optimizer.SGD(learning_rate=0.1))
        module.fit(train_iter, optimizer=opt, num_epoch=1)
    """

    _OWN = frozenset({"_optimizer", "_gradient_predivide_factor", "_num_groups"})

    def __init__(self, optimizer: mx.optimizer.Optimizer, gradient_predivide_factor: float = 1.0,
                 num_groups: int = 0):
        if not isinstance(optimizer, mx.optimizer.Optimizer):
            raise BadArgumentError(f"optimizer should be an mx.optimizer.Optimizer. Got: {type(optimizer).__name__}")
        predivide = _predivide(gradient_predivide_factor)
        object.__setattr__(self, "_optimizer", optimizer)
        object.__setattr__(self, "_gradient_predivide_factor", predivide)
        object.__setattr__(self, "_num_groups", num_groups)
        optimizer.rescale_grad *= predivide / size()

    def __getattr__(self, item: str) -> Any:
        if item in DistributedOptimizer._OWN:  # not set yet (unpickling): no recursion
            raise AttributeError(item)
        return getattr(self._optimizer, item)

    def __setattr__(self, item: str, value: Any) -> None:
        if item in DistributedOptimizer._OWN:
            object.__setattr__(self, item, value)
        else:
            setattr(self._optimizer, item, value)

    def _allreduce(self, index: Any, grad: Any) -> None:
        indices, grads = (index, grad) if isinstance(index, (list, tuple)) else ([index], [grad])
        _sum_in_place(grads, [f"gradient.{i}" for i in indices], self._gradient_predivide_factor)

    def update(self, index: Any, weight: Any, grad: Any, state: Any) -> None:
        self._allreduce(index, grad)
        self._optimizer.update(index, weight, grad, state)

    def update_multi_precision(self, index: Any, weight: Any, grad: Any, state: Any) -> None:
        self._allreduce(index, grad)
        self._optimizer.update_multi_precision(index, weight, grad, state)

    # The wrapped optimizer's own versions, which a subclass may override.
    def create_state(self, index: Any, weight: Any) -> Any:
        return self._optimizer.create_state(index, weight)

    def create_state_multi_precision(self, index: Any, weight: Any) -> Any:
        return self._optimizer.create_state_multi_precision(index, weight)

    @property
    def learning_rate(self) -> float:
        return self._optimizer.learning_rate

    def set_learning_rate(self, lr: float) -> None:
        self._optimizer.set_learning_rate(lr)

    def set_lr_mult(self, args_lr_mult: Any) -> None:
        self._optimizer.set_lr_mult(args_lr_mult)

    def set_wd_mult(self, args_wd_mult: Any) -> None:
        self._optimizer.set_wd_mult(args_wd_mult)

    def _set_current_context(self, device_id: int) -> None:
        self._optimizer._set_current_context(device_id)


class DistributedTrainer(mx.gluon.Trainer):
    """A ``gluon.Trainer`` whose ``step`` applies the gradient averaged over all ranks.

    The gradients (of the first context of each parameter: one context per
    process) are summed over all ranks in ``_allreduce_grads``, and the
    trainer's scale is multiplied by ``gradient_predivide_factor / size()``;
    there is no kvstore.

    Args:
        params: ``block.collect_params()`` (a dict or ParameterDict) or a
            list of Parameters, in the same order on every rank.
        optimizer: an optimizer name or instance, as for ``gluon.Trainer``
            (a DistributedOptimizer is unwrapped, with a warning).
        optimizer_params: the optimizer's arguments when given by name.
        compression: ``Compression.none`` (default) or ``Compression.fp16``.
        gradient_predivide_factor: see the module's docstring.
        prefix: prepended to the names of the gradient reductions; several
            trainers stepping at once need different prefixes.
        num_groups: accepted for compatibility; no effect.

    Example::

        trainer = hvd.DistributedTrainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
        with autograd.record():
            loss = loss_fn(net(x), y)
        loss.backward()
        trainer.step(batch_size)  # the local batch size
    """

    def __init__(self, params: Any, optimizer: Any, optimizer_params: Optional[dict] = None,
                 compression: Any = Compression.none, gradient_predivide_factor: float = 1.0,
                 prefix: Optional[str] = None, num_groups: int = 0):
        if prefix is not None and not isinstance(prefix, str):
            raise BadArgumentError(f"prefix should be a string. Got: {prefix!r}")
        predivide = _predivide(gradient_predivide_factor)
        if isinstance(optimizer, DistributedOptimizer):
            optimizer = optimizer._optimizer
            warnings.warn("DistributedTrainer takes the optimizer itself, not a DistributedOptimizer: "
                          "it was unwrapped", stacklevel=2)
        super().__init__(params, optimizer, optimizer_params=optimizer_params, kvstore=None)
        self._scale *= predivide / size()
        self._gradient_predivide_factor = predivide
        self._compression = compression
        self._prefix = prefix or ""
        self._num_groups = num_groups

    def _allreduce_grads(self) -> None:
        chosen = [(i, p) for i, p in enumerate(self._params) if p.grad_req != "null"]
        _sum_in_place([p.list_grad()[0] for _, p in chosen], [f"{self._prefix}{i}" for i, _ in chosen],
                      self._gradient_predivide_factor, self._compression)
