"""Gradient averaging overlapped with the backward pass: the one implementation
behind the torch :func:`~ring_strategy.torch.DistributedOptimizer` and the
Lightning ``RingStrategy``.

Hooks
    Every trainable parameter gets a post-accumulate-grad hook that starts an
    in-place asynchronous allreduce of its gradient the moment autograd has
    finished accumulating it, so the last layers communicate while the first
    ones still compute, and a gradient hook that runs before autograd
    accumulates into ``.grad`` (see "Accumulation"). Reductions are named
    after the parameters, names every rank shares, so the engine matches them
    whatever order the hooks fire in. :meth:`GradientSync.synchronize` waits
    for all of them.

Accumulation
    A parameter's gradient may be computed ``backward_passes_per_step`` times
    between two calls of :meth:`GradientSync.restart`; its reduction starts
    after the last of them, so the passes are summed locally and reduced once.
    The optimizer restarts the count in ``step()`` and ``synchronize()``, the
    Lightning strategy at every optimizer step (each evaluation of the
    optimizer's closure). One more backward pass raises ``AssertionError``
    with the message the owner gave, on every rank that runs it, from inside
    ``backward()`` and before autograd touches ``.grad`` (whose reduction may
    still be writing it): the averaged gradient would otherwise silently get
    a local one added. The way out is to say how many passes to accumulate:
    ``backward_passes_per_step`` for the optimizer; for Lightning,
    ``Trainer(accumulate_grad_batches=N)``, or
    ``trainer.strategy.block_backward_sync()`` around the passes that only
    accumulate.

Paused
    Inside :meth:`GradientSync.paused` (Lightning's ``block_backward_sync``)
    the hooks do nothing: gradients accumulate locally and are not counted,
    and the next counted pass reduces the sum.

Gradients nobody computed
    :meth:`GradientSync.synchronize` also reduces every hooked parameter
    whose reduction has not started (its hook did not fire: a branch this
    rank did not take, or fewer passes than ``backward_passes_per_step``), as
    zeros where ``.grad`` is None, so every rank takes part in every
    reduction and none is left waiting.

Groups
    Parameters may be reduced in groups (one grouped allreduce once every
    member is due); sparse gradients travel as allgathered (indices, values)
    unless ``sparse_as_dense``.

Schedule
    With the ``after_backward`` schedule (:mod:`ring_strategy._schedule`:
    ``RING_GRADIENT_SCHEDULE``, or ``auto`` on a host without a spare core
    per rank) the hooks only count passes; :meth:`GradientSync.synchronize`
    submits every due gradient at once, as one grouped allreduce (or one per
    group, when groups are given).
"""

from __future__ import annotations

import weakref
from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

import torch

from ring_strategy._core.rules import predivide_scales
from ring_strategy._schedule import AFTER_BACKWARD, OVERLAP, gradient_schedule
from ring_strategy.process_sets import averages_here
from ring_strategy.torch.compression import Compression
from ring_strategy.torch.mpi_ops import (
    Average,
    allreduce_async_,
    global_process_set,
    grouped_allreduce_async_,
    sparse_allreduce_async,
    synchronize,
)

__all__ = ["GradientSync", "check_passes", "remove_hooks"]

# Finishes one submitted reduction: waits for it and writes the result into
# the parameters' .grad. Raises the operation's error.
Finisher = Callable[[], None]
Group = Tuple[torch.Tensor, ...]

TOO_MANY_PASSES = (
    "Gradients were computed more than backward_passes_per_step times before "
    "call to step(). Increase backward_passes_per_step to accumulate gradients "
    "locally."
)


def check_passes(passes: Any) -> None:
    """Raises ValueError unless ``passes`` is a positive integer."""
    if isinstance(passes, bool) or not isinstance(passes, int) or passes < 1:
        raise ValueError(f"backward_passes_per_step should be a positive integer. Got: {passes!r}")


def _run_all(finishers: Sequence[Finisher]) -> None:
    """Runs every finisher even when one fails, then raises the first error,
    so no reduction is left in flight."""
    error: Optional[BaseException] = None
    for finish in finishers:
        try:
            finish()
        except BaseException as e:  # noqa: BLE001 - re-raised below
            if error is None:
                error = e
    if error is not None:
        raise error


def remove_hooks(hooks: Dict[torch.Tensor, Tuple[Any, ...]]) -> None:
    """Removes the hooks of :attr:`GradientSync.hooks` (safe to call again)."""
    for handles in hooks.values():
        for handle in handles:
            handle.remove()
    hooks.clear()


class _Reducer:
    """Submits the reduction of one parameter's or one group's gradients."""

    def __init__(self, op: int, compression: Any, gradient_predivide_factor: float, sparse_as_dense: bool,
                 process_set: Any) -> None:
        self.op = op
        self.compression = compression
        self.predivide = float(gradient_predivide_factor)
        self.sparse_as_dense = sparse_as_dense
        self.process_set = process_set

    def _scale_factors(self) -> Tuple[float, float]:
        return predivide_scales(self.op, self.predivide)

    def _is_sparse(self, p: torch.Tensor) -> bool:
        return p.grad is not None and p.grad.is_sparse and not self.sparse_as_dense

    @staticmethod
    def _dense_grad(p: torch.Tensor) -> Tuple[torch.Tensor, bool]:
        """The tensor to reduce for ``p`` and whether it stands for a sparse grad."""
        if p.grad is None:
            # Not computed here (unused branch, frozen on this rank only,
            # set_to_none): other ranks may have it, so take part with zeros.
            p.grad = torch.zeros_like(p, memory_format=torch.preserve_format)
        grad = p.grad
        if grad.is_sparse:
            return grad.to_dense(), True
        return grad, False

    def one(self, p: torch.Tensor, name: str) -> Finisher:
        if self._is_sparse(p):
            return self._sparse(p, name)
        tensor, was_sparse = self._dense_grad(p)
        compressed, ctx = self.compression.compress(tensor)
        prescale, postscale = self._scale_factors()
        handle = allreduce_async_(
            compressed, name=name, op=self.op, prescale_factor=prescale,
            postscale_factor=postscale, process_set=self.process_set,
        )

        def finish() -> None:
            output = self.compression.decompress(synchronize(handle), ctx)
            _store(p, tensor, output, was_sparse)

        return finish

    def group(self, group: Group, names: Sequence[str]) -> Finisher:
        finishers = [self._sparse(p, n) for p, n in zip(group, names) if self._is_sparse(p)]
        dense = [p for p in group if not self._is_sparse(p)]
        if dense:
            prepared = [self._dense_grad(p) for p in dense]
            compressed, ctxs = zip(*[self.compression.compress(t) for t, _ in prepared])
            prescale, postscale = self._scale_factors()
            handle = grouped_allreduce_async_(
                list(compressed), name=names[0], op=self.op,
                prescale_factor=prescale, postscale_factor=postscale, process_set=self.process_set,
            )

            def finish_dense() -> None:
                outputs = synchronize(handle)
                for p, (tensor, was_sparse), output, ctx in zip(dense, prepared, outputs, ctxs):
                    _store(p, tensor, self.compression.decompress(output, ctx), was_sparse)

            finishers.append(finish_dense)
        return lambda: _run_all(finishers)

    def _sparse(self, p: torch.Tensor, name: str) -> Finisher:
        """Sparse gradients travel as allgathered (indices, values) pairs."""
        reduced = sparse_allreduce_async(p.grad, name=name, op=self.op, process_set=self.process_set)

        def finish() -> None:
            p.grad = reduced().coalesce()

        return finish


def _store(p: torch.Tensor, sent: torch.Tensor, output: torch.Tensor, was_sparse: bool) -> None:
    """Puts the reduced gradient where ``p.grad`` is."""
    if was_sparse:
        p.grad = output.to_sparse()
    elif p.grad is sent:
        if output is not sent:
            sent.copy_(output)
    else:
        # The owner replaced p.grad while the reduction was in flight.
        p.grad = output


class GradientSync:
    """Hooks that average the gradients of a set of parameters over the ranks.

    Args:
        named_parameters: Returns the ``(name, parameter)`` pairs to average,
            called again by :meth:`refresh` to find parameters added or
            unfrozen since; a name is used for a parameter that has none yet.
        names: Names to use instead, by parameter.
        backward_passes_per_step: Backward passes accumulated before a
            parameter's reduction starts.
        op: The engine op (``Average`` by default).
        compression: The dtype gradients travel in (``Compression.none``).
        gradient_predivide_factor: With ``Average``: scale by ``1 / f``
            before the sum and by ``f / size`` after it.
        groups: Parameters reduced together; a parameter in no group is
            reduced alone, or, when groups are given, in a group of its own.
        sparse_as_dense: Reduce sparse gradients as dense tensors.
        process_set: The ranks that average.
        too_many_passes: The message of the error one pass too many raises.
        reducer: Submits the reductions instead of the gradient averaging
            (``one(p, name)`` and ``group(params, names)``, each returning a
            finisher): the Adasum rule of ring_strategy/torch/adasum_step.py.
        schedule: When reductions start: ``overlap``, ``after_backward`` or
            ``auto``; None reads ``RING_GRADIENT_SCHEDULE`` (see "Schedule").
            Ignored with a ``reducer``.
    """

    def __init__(
        self,
        named_parameters: Callable[[], Iterable[Tuple[str, torch.Tensor]]],
        *,
        names: Optional[Dict[torch.Tensor, str]] = None,
        backward_passes_per_step: int = 1,
        op: int = Average,
        compression: Any = Compression.none,
        gradient_predivide_factor: float = 1.0,
        groups: Optional[Sequence[Group]] = None,
        sparse_as_dense: bool = False,
        process_set: Any = global_process_set,
        too_many_passes: str = TOO_MANY_PASSES,
        reducer: Any = None,
        schedule: Optional[str] = None,
    ) -> None:
        check_passes(backward_passes_per_step)
        #: ``overlap`` or ``after_backward``; a reducer of its own (Adasum,
        #: which combines tensor by tensor) always overlaps.
        self.schedule = gradient_schedule(schedule) if reducer is None else OVERLAP
        self.backward_passes_per_step = backward_passes_per_step
        self._process_set = process_set
        self.names: Dict[torch.Tensor, str] = dict(names or {})
        #: Reductions of this step, by parameter or by group; None marks a
        #: parameter whose hook fired but whose reduction is not due yet.
        self.handles: Dict[Any, Optional[Finisher]] = {}
        #: The hook handles, by parameter (see :func:`remove_hooks`).
        self.hooks: Dict[torch.Tensor, Tuple[Any, ...]] = {}
        self.groups: List[Group] = []
        self._named_parameters = named_parameters
        self._reducer = reducer or _Reducer(op, compression, gradient_predivide_factor, sparse_as_dense, process_set)
        self._too_many_passes = too_many_passes
        self._passes_left: Dict[torch.Tensor, int] = {}
        self._group_of: Dict[torch.Tensor, Group] = {}
        self._group_counts: Dict[Group, int] = {}
        self._paused = False
        for group in groups or ():
            self._add_group(tuple(group))
        self.refresh()

    @property
    def active(self) -> bool:
        """Whether gradients need averaging here, in the current world (an
        elastic job may grow from one rank, or shrink to one)."""
        return averages_here(self._process_set)

    # ------------------------------------------------------------ parameters
    def _add_group(self, group: Group) -> None:
        self.groups.append(group)
        for p in group:
            self._group_of[p] = group
        self._group_counts[group] = 0

    def refresh(self) -> None:
        """Hooks every parameter that requires grad and has no hook yet."""
        if not self.active:
            return
        for name, p in self._named_parameters():
            self.names.setdefault(p, name)
            if p.requires_grad and p not in self.hooks:
                self._hook(p)
                if self.groups and p not in self._group_of:
                    self._add_group((p,))

    def _hook(self, p: torch.Tensor) -> None:
        # The hooks live as long as the parameter: they must not keep this
        # object (or, through it, its owner) alive.
        sync, param = weakref.ref(self), weakref.ref(p)

        def before_accumulation(grad: torch.Tensor) -> None:
            owner, q = sync(), param()
            if owner is not None and q is not None:
                owner._check_pass(q)

        def after_accumulation(q: torch.Tensor) -> None:
            owner = sync()
            if owner is not None:
                owner._on_grad_ready(q)

        self.hooks[p] = (p.register_hook(before_accumulation), p.register_post_accumulate_grad_hook(after_accumulation))
        self._passes_left[p] = self.backward_passes_per_step

    # ------------------------------------------------------------ hooks
    def _check_pass(self, p: torch.Tensor) -> None:
        if not self._paused and self._passes_left.get(p, 1) <= 0:
            raise AssertionError(self._too_many_passes)

    def _on_grad_ready(self, p: torch.Tensor) -> None:
        """Runs when autograd has accumulated ``p.grad`` in a counted backward pass."""
        if self._paused or p not in self._passes_left:
            return
        self._passes_left[p] -= 1
        if self._passes_left[p] > 0 or self.schedule == AFTER_BACKWARD:
            self.handles.setdefault(p, None)  # due now, submitted by synchronize() after backward
            return
        group = self._group_of.get(p)
        if group is None:
            self.handles[p] = self._reducer.one(p, self.names[p])
            return
        self._group_counts[group] += 1
        if self._group_counts[group] == len(group):
            for member in group:
                self.handles.pop(member, None)
            self.handles[group] = self._submit_group(group)
        else:
            self.handles.setdefault(p, None)

    def _submit_group(self, group: Group) -> Finisher:
        return self._reducer.group(group, [self.names[p] for p in group])

    # ------------------------------------------------------------ control
    def synchronize(self) -> None:
        """Reduces what has not started (zeros where ``.grad`` is None) and
        waits for every reduction; nothing while paused or alone."""
        if not self.active or self._paused:
            return
        self.refresh()
        try:
            if self.groups:
                for group in self.groups:
                    if group not in self.handles:
                        for member in group:
                            self.handles.pop(member, None)
                        live = tuple(p for p in group if p.requires_grad)
                        if live:
                            self.handles[group] = self._submit_group(live)
            else:
                waiting = [p for p in self.hooks if self.handles.get(p) is None and p.requires_grad]
                if self.schedule == AFTER_BACKWARD and len(waiting) > 1:
                    for p in waiting:
                        self.handles.pop(p, None)
                    self.handles[tuple(waiting)] = self._submit_group(tuple(waiting))
                else:
                    for p in waiting:
                        self.handles[p] = self._reducer.one(p, self.names[p])
            _run_all([f for f in self.handles.values() if f is not None])
        finally:
            self.handles.clear()
            for group in self._group_counts:
                self._group_counts[group] = 0

    def restart(self) -> None:
        """Starts a new accumulation: every parameter may take
        ``backward_passes_per_step`` passes again."""
        for p in self._passes_left:
            self._passes_left[p] = self.backward_passes_per_step
        for group in self._group_counts:
            self._group_counts[group] = 0

    def set_backward_passes_per_step(self, passes: int) -> None:
        """Changes how many passes accumulate, and restarts the count."""
        check_passes(passes)
        self.backward_passes_per_step = passes
        self.restart()

    def finish_in_flight(self) -> None:
        """Waits for the reductions already started, without starting others."""
        pending = [f for f in self.handles.values() if f is not None]
        self.handles = {}
        _run_all(pending)

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Inside, backward passes accumulate locally: nothing is counted or reduced."""
        before, self._paused = self._paused, True
        try:
            yield
        finally:
            self._paused = before

    def close(self) -> None:
        """Waits for what is in flight (ignoring its errors) and removes the hooks."""
        try:
            self.finish_in_flight()
        except Exception:  # noqa: BLE001 - the owner is being torn down
            pass
        remove_hooks(self.hooks)
