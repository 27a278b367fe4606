"""DistributedOptimizer: data-parallel gradient averaging for any torch optimizer.

The wrapper is a dynamic subclass of the user's optimizer class, so
``isinstance(opt, torch.optim.SGD)``, ``state_dict()`` and
``load_state_dict()`` behave as before. Its gradients are averaged by a
:class:`~ring_strategy.torch.grad_sync.GradientSync`: a hook on every
trainable parameter starts an in-place asynchronous allreduce of its gradient
the moment autograd has finished accumulating it, so communication of the last
layers overlaps the backward pass of the first ones. ``step()`` waits for every
allreduce and then runs the wrapped optimizer's own ``step()``. A gradient
computed more than ``backward_passes_per_step`` times before ``step()`` (or
``synchronize()``) raises ``AssertionError`` in that backward pass.

Behaviour follows Horovod 0.28's ``horovod.torch.DistributedOptimizer``, with
its torch 2.x breakages fixed: ``zero_grad(set_to_none=...)`` works, gradients
that are ``None`` are handled, a parameter whose gradient was not computed on
some rank is reduced as zeros there instead of hanging the job, and step hooks
run once per step.
"""

from __future__ import annotations

import warnings
import weakref
from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

import torch

from ring_strategy.torch.adasum_step import DeltaReducer
from ring_strategy.torch.compression import Compression
from ring_strategy._objects import broadcast_object
from ring_strategy.process_sets import averages_here
from ring_strategy.torch.grad_sync import GradientSync, check_passes, remove_hooks
from ring_strategy.torch.mpi_ops import Adasum, Average, global_process_set

__all__ = ["DistributedOptimizer"]

_ZERO_GRAD_IN_FLIGHT = (
    "optimizer.zero_grad() was called after loss.backward() but before "
    "optimizer.step() or optimizer.synchronize(). This is prohibited as it can "
    "cause a race condition: the gradients being averaged would be lost. With "
    "backward_passes_per_step > 1, call zero_grad() only after step()."
)


def _split_list(items: Sequence[Any], n: int) -> List[List[Any]]:
    """``items`` cut into ``n`` consecutive chunks whose sizes differ by at most one."""
    d, r = divmod(len(items), n)
    return [list(items[i * d + min(i, r):(i + 1) * d + min(i + 1, r)]) for i in range(n)]


def _named_by_position(optimizer: "_DistributedOptimizer") -> Callable[[], Iterator[Tuple[str, torch.Tensor]]]:
    """The optimizer's parameters, each named by its position, which every
    rank agrees on: the names of parameters added by ``add_param_group()``
    after wrapping. Holds the optimizer weakly."""
    ref = weakref.ref(optimizer)

    def named() -> Iterator[Tuple[str, torch.Tensor]]:
        opt = ref()
        if opt is not None:
            for i, p in enumerate(opt._all_parameters()):
                yield f"DistributedOptimizer.allreduce.added.{i}", p

    return named


class _DistributedOptimizer(torch.optim.Optimizer):
    """Methods placed in front of the user's optimizer class in the MRO.

    Never instantiated directly: :func:`DistributedOptimizer` builds
    ``type(name, (_DistributedOptimizer, type(optimizer)), {})`` and moves the
    user's optimizer's state into an instance of it.
    """

    _sync: GradientSync

    # ------------------------------------------------------------ set-up
    def _ring_setup(
        self,
        named_parameters: Optional[Iterable[Tuple[str, torch.Tensor]]],
        compression: Any,
        backward_passes_per_step: int,
        op: int,
        gradient_predivide_factor: float,
        groups: Union[None, int, Sequence[Sequence[torch.Tensor]]],
        sparse_as_dense: bool,
        process_set: Any,
    ) -> None:
        self.backward_passes_per_step = backward_passes_per_step
        self.op = op
        self.gradient_predivide_factor = gradient_predivide_factor
        self.sparse_as_dense = sparse_as_dense
        self.process_set = process_set
        self._synchronized = False
        self._should_synchronize = True
        names = self._name_parameters(named_parameters)
        formed = None if groups is None else self._form_groups(groups, names)
        self._sync = GradientSync(
            _named_by_position(self), names=names, backward_passes_per_step=backward_passes_per_step, op=op,
            compression=compression, gradient_predivide_factor=gradient_predivide_factor, groups=formed,
            sparse_as_dense=sparse_as_dense, process_set=process_set,
            reducer=self._ring_reducer(compression, process_set),
        )

    def _ring_reducer(self, compression: Any, process_set: Any) -> Any:
        """What the gradient hooks submit: None for the gradient averaging, or
        a compression's own reducer (``PowerSGD``'s low-rank rounds,
        ring_strategy/torch/powersgd.py)."""
        make = getattr(compression, "make_reducer", None)
        return None if make is None else make(process_set)

    def _all_parameters(self) -> Iterator[torch.Tensor]:
        for group in self.param_groups:
            yield from group["params"]

    def _name_parameters(
        self, named_parameters: Optional[Iterable[Tuple[str, torch.Tensor]]]
    ) -> Dict[torch.Tensor, str]:
        params = list(self._all_parameters())
        if named_parameters is None:
            # One counter over every param group (Horovod restarts it per group,
            # which gives two groups the same names).
            return {p: f"DistributedOptimizer.allreduce.noname.{i}" for i, p in enumerate(params)}
        named = list(named_parameters)
        if any(not (isinstance(x, tuple) and len(x) == 2) for x in named):
            raise ValueError(
                "named_parameters should be a sequence of tuples (name, parameter), "
                "usually produced by model.named_parameters()."
            )
        seen, dups = set(), []
        for name, _ in named:
            if name in seen and name not in dups:
                dups.append(name)
            seen.add(name)
        if dups:
            raise ValueError(
                "Parameter names in named_parameters must be unique. Found duplicates: " + ", ".join(map(str, dups))
            )
        names: Dict[torch.Tensor, str] = {}
        for name, p in named:
            names.setdefault(p, str(name))  # a tied parameter keeps its first name
        unnamed = [i for i, p in enumerate(params) if p not in names]
        if unnamed:
            shapes = ", ".join(f"#{i} {tuple(params[i].shape)}" for i in unnamed)
            raise ValueError(
                "named_parameters was specified, but one or more parameters of the optimizer "
                f"were not named (index in the optimizer, shape): {shapes}"
            )
        # Named tensors that the optimizer does not update are ignored, as in
        # Horovod: an optimizer over a sub-module with model.named_parameters()
        # is a common pattern.
        return {p: names[p] for p in params}

    def _form_groups(
        self, groups: Union[int, Sequence[Sequence[torch.Tensor]]], names: Dict[torch.Tensor, str]
    ) -> List[Tuple[torch.Tensor, ...]]:
        """The reduction groups ``groups`` asks for, checked; every trainable
        parameter in exactly one."""
        trainable = [p for p in self._all_parameters() if p.requires_grad]
        if isinstance(groups, bool) or not isinstance(groups, (int, list, tuple)):
            raise ValueError(f"groups should be a positive integer or a list of lists of parameters. Got: {groups!r}")
        if isinstance(groups, int):
            if groups <= 0:
                raise ValueError(f"groups should be a positive integer or a list of lists of parameters. Got: {groups!r}")
            if averages_here(self.process_set):
                # Every rank must cut the same list: take rank 0's order.
                order = broadcast_object(
                    [names[p] for p in trainable], root_rank=0,
                    name="DistributedOptimizer.groups", process_set=self.process_set,
                )
                by_name = {names[p]: p for p in trainable}
                if sorted(order) != sorted(by_name):
                    raise ValueError("DistributedOptimizer: the parameter names differ between ranks")
                trainable = [by_name[name] for name in order]
            return [tuple(g) for g in _split_list(trainable, groups) if g]
        in_optimizer = set(self._all_parameters())
        formed, grouped = [], set()
        for i, group in enumerate(groups):
            if isinstance(group, torch.Tensor) or not isinstance(group, (list, tuple)):
                raise ValueError(f"groups[{i}] should be a list of parameters. Got: {type(group).__name__}")
            members = []
            for p in group:
                if not isinstance(p, torch.Tensor):
                    raise ValueError(f"groups must consist of torch.Tensor. Got: {type(p).__name__} in groups[{i}]")
                if p in grouped:
                    raise ValueError(f"A parameter can only appear once in groups. {names[p]!r} repeats in groups[{i}]")
                if p not in in_optimizer:
                    raise ValueError(f"groups[{i}] holds a tensor of shape {tuple(p.shape)} that is not a parameter of the optimizer")
                grouped.add(p)
                if p.requires_grad:
                    members.append(p)
            if members:
                formed.append(tuple(members))
        formed.extend((p,) for p in trainable if p not in grouped)  # the rest: one group each
        return formed

    # ------------------------------------------------------------ public API
    def set_backward_passes_per_step(self, passes: int) -> None:
        """Changes how many backward passes accumulate before the allreduce."""
        self._sync.set_backward_passes_per_step(passes)
        self.backward_passes_per_step = passes

    def synchronize(self) -> None:
        """Waits until every gradient is averaged across ranks.

        Gradients whose reduction has not started (the hook did not fire: the
        parameter was unused this step, or fewer than
        ``backward_passes_per_step`` backward passes ran) are submitted now,
        as zeros where ``.grad`` is None, so every rank takes part in every
        reduction. A parameter that became trainable, or joined through
        ``add_param_group()``, is averaged from now on. Call it before
        touching the gradients (clipping), then step inside
        :meth:`skip_synchronize`.
        """
        try:
            self._sync.synchronize()
        finally:
            self._sync.restart()
        self._synchronized = True

    @contextmanager
    def skip_synchronize(self) -> Iterator[None]:
        """Makes ``step()`` inside the block skip synchronization.

        Use it after an explicit :meth:`synchronize`::

            optimizer.synchronize()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            with optimizer.skip_synchronize():
                optimizer.step()
        """
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure: Optional[Callable[[], Any]] = None) -> Any:
        """Averages the gradients across ranks, then runs the optimizer's step.

        With a ``closure`` (LBFGS and friends), the gradients its backward
        pass computes are averaged before the optimizer reads them.
        """
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn(
                    "optimizer.step() called without optimizer.skip_synchronize() context after "
                    "optimizer.synchronize(). This can cause training slowdown. You may want to "
                    "consider using optimizer.skip_synchronize() context if you use "
                    "optimizer.synchronize() in your code."
                )
            if closure is None or self._sync.handles:
                self.synchronize()
            if closure is not None and self._sync.active:
                closure = self._synchronizing(closure)
        self._synchronized = False
        try:
            return super().step(closure)
        finally:
            self._synchronized = False

    # torch patches a class's step() to run step hooks; the wrapped optimizer's
    # own step() already does that, so this one must stay unpatched or the
    # hooks would run twice.
    step.hooked = True  # type: ignore[attr-defined]

    def _ring_local_step(self) -> Any:
        """The wrapped optimizer's own step, on this rank's gradients as they
        are: no collective. ``broadcast_optimizer_state`` takes one to create
        the state of a fresh optimizer."""
        return super().step()

    def _synchronizing(self, closure: Callable[[], Any]) -> Callable[[], Any]:
        def run() -> Any:
            loss = closure()
            self.synchronize()
            return loss

        return run

    def zero_grad(self, set_to_none: bool = True) -> None:
        """As ``torch.optim.Optimizer.zero_grad``; raises AssertionError
        between ``backward()`` and ``step()``, while gradients are being
        averaged, as Horovod does."""
        if self._sync.handles:
            raise AssertionError(_ZERO_GRAD_IN_FLIGHT)
        return super().zero_grad(set_to_none=set_to_none)

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """As ``torch.optim.Optimizer.load_state_dict``; reductions in flight
        are finished first and the accumulation count restarts."""
        try:
            self._sync.finish_in_flight()
        finally:
            self._sync.restart()
        self._synchronized = False
        self._should_synchronize = True
        super().load_state_dict(state_dict)


class _DistributedAdasumOptimizer(_DistributedOptimizer):
    """``op=Adasum`` on more than one rank: each parameter takes this rank's
    own optimizer step as soon as its gradient is due, and the change is
    reduced with Adasum (ring_strategy/torch/adasum_step.py); ``step()``
    waits for the reductions, which leave every parameter at
    ``old + adasum(change)``, and runs no step of its own."""

    def _ring_reducer(self, compression: Any, process_set: Any) -> Any:
        return DeltaReducer(weakref.ref(self), lambda opt: opt._ring_local_step(), compression, process_set)

    def step(self, closure: Optional[Callable[[], Any]] = None) -> Any:
        """Runs ``closure`` (its backward pass steps the parameters locally),
        then finishes every parameter's Adasum; returns the closure's loss."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if self._should_synchronize:
            self.synchronize()
        self._synchronized = False
        return loss

    step.hooked = True  # type: ignore[attr-defined]


def DistributedOptimizer(
    optimizer: torch.optim.Optimizer,
    named_parameters: Optional[Iterable[Tuple[str, torch.Tensor]]] = None,
    compression: Any = Compression.none,
    backward_passes_per_step: int = 1,
    op: int = Average,
    gradient_predivide_factor: float = 1.0,
    groups: Union[None, int, Sequence[Sequence[torch.Tensor]]] = None,
    sparse_as_dense: bool = False,
    process_set: Any = global_process_set,
    *,
    num_groups: Optional[int] = None,
    shard_optimizer_state: bool = False,
) -> torch.optim.Optimizer:
    """Wraps ``optimizer`` so that ``step()`` applies gradients averaged over all ranks.

    Each gradient's allreduce starts as soon as autograd has accumulated it,
    overlapping communication with the rest of the backward pass; ``step()``
    waits for them and runs the wrapped optimizer's step. The returned object
    is an instance of a subclass of ``type(optimizer)`` that takes over the
    optimizer's param groups, defaults and state (which it shares with the
    original); keep using only the returned object.

    Gradient clipping needs the averaged gradients::

        loss.backward()
        optimizer.synchronize()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        with optimizer.skip_synchronize():
            optimizer.step()

    Args:
        optimizer: the torch optimizer to wrap.
        named_parameters: ``(name, parameter)`` pairs, usually
            ``model.named_parameters()``; the names identify the reductions
            and must be unique, and every parameter of the optimizer must be
            named. Without it, names are generated from the parameters' order.
        compression: ``Compression.none`` (default), ``.fp16`` or ``.bf16``:
            the dtype gradients travel in; or ``PowerSGD(rank=...)``:
            low-rank compression with error feedback
            (ring_strategy/torch/powersgd.py), with ``op=Average``.
        backward_passes_per_step: backward passes accumulated locally before
            the allreduce (gradient accumulation); the gradients are summed
            over the passes and averaged over ranks, so scale the loss by
            ``1 / backward_passes_per_step`` for a mean.
        op: ``Average`` (default), ``Sum``, ``Min``, ``Max`` or ``Product``
            reduce the gradients. ``Adasum`` (on more than one rank): each
            rank steps the wrapped optimizer with its own gradients and the
            parameters move by the Adasum of the ranks' changes
            (docs/adasum.md); a power-of-two number of ranks, floating-point
            parameters.
        gradient_predivide_factor: with ``Average``, gradients are scaled by
            ``1 / f`` before the sum and by ``f / size`` after it.
        groups: fuse reductions explicitly: an int splits the trainable
            parameters into that many groups, a list of lists of parameters
            names the groups (the other parameters form one group each). Each
            group is reduced as one grouped allreduce once all its gradients
            are ready.
        sparse_as_dense: reduce sparse gradients as dense tensors (converted
            back after); otherwise they are allgathered as (indices, values).
        process_set: the ranks that average the gradients.
        num_groups: deprecated spelling of an int ``groups``.
        shard_optimizer_state: each rank keeps the optimizer state of 1/size
            of every parameter (ZeRO stages 1 and 2;
            ring_strategy/torch/sharded_optimizer.py).

    Returns:
        The distributed optimizer.

    Raises:
        ValueError: bad names, groups or factors.
    """
    if isinstance(optimizer, _DistributedOptimizer):
        raise ValueError("optimizer is already a DistributedOptimizer; wrap the plain torch optimizer once")
    if shard_optimizer_state:
        from ring_strategy.torch.sharded_optimizer import shard_optimizer

        return shard_optimizer(optimizer, named_parameters, compression=compression, op=op, process_set=process_set,
                               backward_passes_per_step=backward_passes_per_step, groups=groups,
                               gradient_predivide_factor=gradient_predivide_factor,
                               sparse_as_dense=sparse_as_dense, num_groups=num_groups)
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise ValueError(f"optimizer should be a torch.optim.Optimizer. Got: {type(optimizer).__name__}")
    check_passes(backward_passes_per_step)
    if num_groups is not None:
        warnings.warn("DistributedOptimizer: num_groups is deprecated, use groups", DeprecationWarning, stacklevel=2)
        if groups is None and num_groups:
            groups = num_groups
    if not isinstance(gradient_predivide_factor, (int, float)) or isinstance(gradient_predivide_factor, bool) \
            or not gradient_predivide_factor > 0:
        raise ValueError(f"gradient_predivide_factor should be a positive number. Got: {gradient_predivide_factor!r}")
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError("gradient_predivide_factor not supported with op != Average")
    if hasattr(compression, "make_reducer") and (op != Average or gradient_predivide_factor != 1.0):
        raise ValueError(f"compression={compression!r} averages: leave op and gradient_predivide_factor at their "
                         f"defaults. Got: op={op!r}, gradient_predivide_factor={gradient_predivide_factor!r}")

    base = type(optimizer)
    wrapper = _DistributedAdasumOptimizer if op == Adasum and averages_here(process_set) else _DistributedOptimizer
    cls = type(base.__name__, (wrapper, base), {"__module__": base.__module__})
    dist = cls.__new__(cls)
    # Take over the optimizer as it is (defaults, state, hooks, any attribute
    # its class set), rather than re-running its __init__, which may need
    # arguments we do not know. Instance attributes that shadow methods (an
    # LR scheduler's wrapped step) stay behind: they are bound to the old object.
    for key, value in vars(optimizer).items():
        if callable(value) and hasattr(base, key):
            continue
        setattr(dist, key, value)
    dist.param_groups = list(optimizer.param_groups)
    dist._zero_grad_profile_name = f"Optimizer.zero_grad#{base.__name__}.zero_grad"
    dist._ring_setup(
        named_parameters, compression, backward_passes_per_step, op, float(gradient_predivide_factor),
        groups, bool(sparse_as_dense), process_set,
    )
    weakref.finalize(dist, remove_hooks, dist._sync.hooks)
    return dist
