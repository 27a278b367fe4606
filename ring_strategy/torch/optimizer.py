"""DistributedOptimizer: data-parallel gradient averaging for any torch optimizer.

The wrapper is a dynamic subclass of the user's optimizer class, so
``isinstance(opt, torch.optim.SGD)``, ``state_dict()`` and
``load_state_dict()`` behave as before. A post-accumulate-grad hook on every
trainable parameter starts an in-place asynchronous allreduce of its gradient
the moment autograd has finished accumulating it, so communication of the last
layers overlaps the backward pass of the first ones. ``step()`` waits for every
allreduce and then runs the wrapped optimizer's own ``step()``.

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

from ring_strategy.torch.compression import Compression
from ring_strategy.torch.mpi_ops import (
    Adasum,
    Average,
    allreduce_async_,
    global_process_set,
    grouped_allreduce_async_,
    size,
    sparse_allreduce_async,
    synchronize,
)

__all__ = ["DistributedOptimizer"]

# Finishes one submitted reduction: waits for it and writes the result into
# the parameters' .grad. Raises the operation's error.
_Finisher = Callable[[], None]

_ZERO_GRAD_IN_FLIGHT = (
    "optimizer.zero_grad() was called after loss.backward() but before "
    "optimizer.step() or optimizer.synchronize(). This is prohibited as it can "
    "cause a race condition: the gradients being averaged would be lost. With "
    "backward_passes_per_step > 1, call zero_grad() only after step()."
)

_TOO_MANY_PASSES = (
    "Gradients were computed more than backward_passes_per_step times before "
    "call to step(). Increase backward_passes_per_step to accumulate gradients "
    "locally."
)


def _set_size(process_set: Any) -> int:
    return process_set.size() or size()


def _split_list(items: Sequence[Any], n: int) -> List[List[Any]]:
    """``items`` cut into ``n`` consecutive chunks whose sizes differ by at most one."""
    d, r = divmod(len(items), n)
    return [list(items[i * d + min(i, r):(i + 1) * d + min(i + 1, r)]) for i in range(n)]


class _DistributedOptimizer(torch.optim.Optimizer):
    """Methods placed in front of the user's optimizer class in the MRO.

    Never instantiated directly: :func:`DistributedOptimizer` builds
    ``type(name, (_DistributedOptimizer, type(optimizer)), {})`` and moves the
    user's optimizer's state into an instance of it.
    """

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
        self._compression = compression
        self.backward_passes_per_step = backward_passes_per_step
        self.op = op
        self.gradient_predivide_factor = gradient_predivide_factor
        self.sparse_as_dense = sparse_as_dense
        self.process_set = process_set

        self._parameter_names = self._name_parameters(named_parameters)
        # Submitted reductions of this step, keyed by parameter or by group
        # (a tuple of parameters); None marks a parameter whose hook fired
        # but whose reduction is not due yet (backward_passes_per_step > 1).
        self._handles: Dict[Any, Optional[_Finisher]] = {}
        self._allreduce_delay: Dict[torch.Tensor, int] = {}
        self._hooked: Dict[torch.Tensor, Any] = {}  # parameter -> hook handle
        self._synchronized = False
        self._should_synchronize = True
        self._p_to_group: Dict[torch.Tensor, Tuple[torch.Tensor, ...]] = {}
        self._group_counts: Dict[Tuple[torch.Tensor, ...], int] = {}
        self._ring_groups: List[Tuple[torch.Tensor, ...]] = []

        self._active = bool(process_set.included()) and _set_size(process_set) > 1
        if groups is not None:
            self._ring_groups = self._form_groups(groups)
            for group in self._ring_groups:
                for p in group:
                    self._p_to_group[p] = group
                self._group_counts[group] = 0
        if self._active:
            for p in self._all_parameters():
                if p.requires_grad:
                    self._register_hook(p)

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

    def _form_groups(self, groups: Union[int, Sequence[Sequence[torch.Tensor]]]) -> List[Tuple[torch.Tensor, ...]]:
        trainable = [p for p in self._all_parameters() if p.requires_grad]
        if isinstance(groups, bool) or not isinstance(groups, (int, list, tuple)):
            raise ValueError(f"groups should be a positive integer or a list of lists of parameters. Got: {groups!r}")
        if isinstance(groups, int):
            if groups <= 0:
                raise ValueError(f"groups should be a positive integer or a list of lists of parameters. Got: {groups!r}")
            if self._active:
                # Every rank must cut the same list: take rank 0's order.
                from ring_strategy.torch.functions import broadcast_object

                order = broadcast_object(
                    [self._parameter_names[p] for p in trainable], root_rank=0,
                    name="DistributedOptimizer.groups", process_set=self.process_set,
                )
                by_name = {self._parameter_names[p]: p for p in trainable}
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
                    raise ValueError(f"A parameter can only appear once in groups. {self._label(p)} repeats in groups[{i}]")
                if p not in in_optimizer:
                    raise ValueError(f"groups[{i}] holds a tensor of shape {tuple(p.shape)} that is not a parameter of the optimizer")
                grouped.add(p)
                if p.requires_grad:
                    members.append(p)
            if members:
                formed.append(tuple(members))
        formed.extend((p,) for p in trainable if p not in grouped)  # the rest: one group each
        return formed

    def _register_hook(self, p: torch.Tensor) -> None:
        if p not in self._parameter_names:
            # Added by add_param_group() after wrapping: named by its position,
            # which every rank agrees on.
            index = next(i for i, q in enumerate(self._all_parameters()) if q is p)
            self._parameter_names[p] = f"DistributedOptimizer.allreduce.added.{index}"
        ref = weakref.ref(self)

        def hook(param: torch.Tensor) -> None:
            opt = ref()
            if opt is not None:
                opt._on_grad_ready(param)

        self._hooked[p] = p.register_post_accumulate_grad_hook(hook)
        self._allreduce_delay[p] = self.backward_passes_per_step

    def _label(self, p: torch.Tensor) -> str:
        name = getattr(self, "_parameter_names", {}).get(p)
        return repr(name) if name is not None else f"parameter of shape {tuple(p.shape)}"

    # ------------------------------------------------------------ hooks
    def _on_grad_ready(self, p: torch.Tensor) -> None:
        """Runs when autograd has accumulated ``p.grad`` in a backward pass."""
        if p not in self._allreduce_delay:
            return
        if self._allreduce_delay[p] <= 0:
            raise AssertionError(_TOO_MANY_PASSES)
        self._allreduce_delay[p] -= 1
        if self._allreduce_delay[p] > 0:
            self._handles.setdefault(p, None)
            return
        group = self._p_to_group.get(p)
        if group is None:
            self._handles[p] = self._submit(p)
            return
        self._group_counts[group] += 1
        if self._group_counts[group] == len(group):
            for member in group:
                self._handles.pop(member, None)
            self._handles[group] = self._submit_group(group)
        else:
            self._handles.setdefault(p, None)

    # ------------------------------------------------------------ submission
    def _scale_factors(self) -> Tuple[float, float]:
        if self.op == Average:
            # The engine divides by the set size for Average after the postscale.
            f = float(self.gradient_predivide_factor)
            return 1.0 / f, f
        return 1.0, 1.0

    def _dense_grad(self, p: torch.Tensor) -> Tuple[torch.Tensor, bool]:
        """The tensor to reduce for ``p`` and whether it stands for a sparse grad."""
        if p.grad is None:
            # Not computed here this step (unused branch, frozen on this rank
            # only, set_to_none): other ranks may have it, so take part with zeros.
            p.grad = torch.zeros_like(p, memory_format=torch.preserve_format)
        grad = p.grad
        if grad.is_sparse:
            return grad.to_dense(), True
        return grad, False

    def _submit(self, p: torch.Tensor) -> _Finisher:
        name = self._parameter_names[p]
        if p.grad is not None and p.grad.is_sparse and not self.sparse_as_dense:
            return self._submit_sparse(p, name)
        tensor, was_sparse = self._dense_grad(p)
        compressed, ctx = self._compression.compress(tensor)
        prescale, postscale = self._scale_factors()
        handle = allreduce_async_(
            compressed, name=name, op=self.op, prescale_factor=prescale,
            postscale_factor=postscale, process_set=self.process_set,
        )

        def finish() -> None:
            output = self._compression.decompress(synchronize(handle), ctx)
            self._store(p, tensor, output, was_sparse)

        return finish

    def _submit_group(self, group: Tuple[torch.Tensor, ...]) -> _Finisher:
        dense, sparse = [], []
        for p in group:
            if p.grad is not None and p.grad.is_sparse and not self.sparse_as_dense:
                sparse.append(p)
            else:
                dense.append(p)
        finishers = [self._submit_sparse(p, self._parameter_names[p]) for p in sparse]
        if dense:
            prepared = [self._dense_grad(p) for p in dense]
            compressed, ctxs = zip(*[self._compression.compress(t) for t, _ in prepared])
            prescale, postscale = self._scale_factors()
            handle = grouped_allreduce_async_(
                list(compressed), name=self._parameter_names[group[0]], op=self.op,
                prescale_factor=prescale, postscale_factor=postscale, process_set=self.process_set,
            )

            def finish_dense() -> None:
                outputs = synchronize(handle)
                for p, (tensor, was_sparse), output, ctx in zip(dense, prepared, outputs, ctxs):
                    self._store(p, tensor, self._compression.decompress(output, ctx), was_sparse)

            finishers.append(finish_dense)

        def finish() -> None:
            _run_all(finishers)

        return finish

    def _submit_sparse(self, p: torch.Tensor, name: str) -> _Finisher:
        """Sparse gradients travel as allgathered (indices, values) pairs."""
        handle = sparse_allreduce_async(p.grad, name=name, op=self.op, process_set=self.process_set)

        def finish() -> None:
            p.grad = synchronize(handle).coalesce()

        return finish

    @staticmethod
    def _store(p: torch.Tensor, sent: torch.Tensor, output: torch.Tensor, was_sparse: bool) -> None:
        """Puts the reduced gradient where ``p.grad`` is."""
        if was_sparse:
            p.grad = output.to_sparse()
        elif p.grad is sent:
            if output is not sent:
                sent.copy_(output)
        else:
            # The user replaced p.grad while the reduction was in flight.
            p.grad = output if output is not sent else sent

    # ------------------------------------------------------------ public API
    def set_backward_passes_per_step(self, passes: int) -> None:
        """Changes how many backward passes accumulate before the allreduce."""
        _check_passes(passes)
        self.backward_passes_per_step = passes
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = passes

    def synchronize(self) -> None:
        """Waits until every gradient is averaged across ranks.

        Gradients whose reduction has not started (the hook did not fire: the
        parameter was unused this step, or fewer than
        ``backward_passes_per_step`` backward passes ran) are submitted now,
        as zeros where ``.grad`` is None, so every rank takes part in every
        reduction. Call it before touching the gradients (clipping), then
        step inside :meth:`skip_synchronize`.
        """
        if not self._active:
            self._synchronized = True
            return
        # A parameter that became trainable or joined (add_param_group) after
        # construction: reduce it from now on.
        for p in self._all_parameters():
            if p.requires_grad and p not in self._hooked:
                self._register_hook(p)
                if p not in self._p_to_group and self._ring_groups:
                    group = (p,)
                    self._ring_groups.append(group)
                    self._p_to_group[p] = group
                    self._group_counts[group] = 0
        try:
            if self._ring_groups:
                for group in self._ring_groups:
                    if group not in self._handles:
                        for member in group:
                            self._handles.pop(member, None)
                        live = tuple(p for p in group if p.requires_grad)
                        if live:
                            self._handles[group] = self._submit_group(live)
            else:
                for p in self._hooked:
                    if self._handles.get(p) is None and p.requires_grad:
                        self._handles[p] = self._submit(p)
            _run_all([f for f in self._handles.values() if f is not None])
        finally:
            self._handles.clear()
            for p in self._allreduce_delay:
                self._allreduce_delay[p] = self.backward_passes_per_step
            for group in self._group_counts:
                self._group_counts[group] = 0
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
            if closure is None or self._handles:
                self.synchronize()
            if closure is not None and self._active:
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
        if self._handles:
            raise AssertionError(_ZERO_GRAD_IN_FLIGHT)
        return super().zero_grad(set_to_none=set_to_none)

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """As ``torch.optim.Optimizer.load_state_dict``; reductions in flight
        are finished first and the accumulation count restarts."""
        if self._handles:
            pending, self._handles = [f for f in self._handles.values() if f is not None], {}
            _run_all(pending)
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = self.backward_passes_per_step
        for group in self._group_counts:
            self._group_counts[group] = 0
        self._synchronized = False
        self._should_synchronize = True
        super().load_state_dict(state_dict)


def _run_all(finishers: Sequence[_Finisher]) -> None:
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


def _check_passes(passes: Any) -> None:
    if isinstance(passes, bool) or not isinstance(passes, int) or passes < 1:
        raise ValueError(f"backward_passes_per_step should be a positive integer. Got: {passes!r}")


def _remove_hooks(hooks: Dict[torch.Tensor, Any]) -> None:
    for handle in hooks.values():
        handle.remove()


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
            the dtype gradients travel in.
        backward_passes_per_step: backward passes accumulated locally before
            the allreduce (gradient accumulation); the gradients are summed
            over the passes and averaged over ranks, so scale the loss by
            ``1 / backward_passes_per_step`` for a mean.
        op: ``Average`` (default), ``Sum``, ``Min``, ``Max`` or ``Product``.
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

    Returns:
        The distributed optimizer.

    Raises:
        ValueError: bad names, groups or factors.
        NotImplementedError: ``op=Adasum``.
    """
    if isinstance(optimizer, _DistributedOptimizer):
        raise ValueError("optimizer is already a DistributedOptimizer; wrap the plain torch optimizer once")
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise ValueError(f"optimizer should be a torch.optim.Optimizer. Got: {type(optimizer).__name__}")
    if op == Adasum:
        raise NotImplementedError("DistributedOptimizer: op=Adasum is not supported yet")
    _check_passes(backward_passes_per_step)
    if num_groups is not None:
        warnings.warn("DistributedOptimizer: num_groups is deprecated, use groups", DeprecationWarning, stacklevel=2)
        if groups is None and num_groups:
            groups = num_groups
    if not isinstance(gradient_predivide_factor, (int, float)) or isinstance(gradient_predivide_factor, bool) \
            or not gradient_predivide_factor > 0:
        raise ValueError(f"gradient_predivide_factor should be a positive number. Got: {gradient_predivide_factor!r}")
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError("gradient_predivide_factor not supported with op != Average")

    base = type(optimizer)
    cls = type(base.__name__, (_DistributedOptimizer, base), {"__module__": base.__module__})
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
    weakref.finalize(dist, _remove_hooks, dist._hooked)
    return dist
