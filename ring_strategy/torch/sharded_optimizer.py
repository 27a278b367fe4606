"""Sharded optimizer state (ZeRO stages 1 and 2): ``DistributedOptimizer(opt, shard_optimizer_state=True)``.

Every parameter is cut into ``size`` consecutive blocks of its flattened
elements, as evenly as possible with the lower ranks taking one element more
(the engine's reducescatter split). Rank r owns block r of every parameter:

- ``step()`` (or ``synchronize()``) reduce-scatters every gradient with one
  grouped reducescatter (Average): rank r receives the average of block r.
  Each block is reduced in the same order as the engine's allreduce reduces
  those elements (collectives/allreduce_choice.h keeps one order per tensor),
  so the averaged values are bitwise those of the unsharded optimizer.
- The wrapped optimizer then steps the blocks only: its state (Adam's two
  moments, SGD's momentum) exists for 1/size of the parameters. Per-element
  optimizers (SGD, Adam, AdamW, ...) compute bitwise what they compute on the
  whole parameter.
- One grouped allgather puts the updated blocks back into the parameters.

After ``synchronize()`` the parameters' own ``.grad`` are released (set to
None, stage 2: a rank keeps only its block of each averaged gradient, in
``param_groups``). Gradients are reduced in ``step()``, after the backward
passes, so any number of backward passes accumulate before a step.
``state_dict()`` is collective: it gathers the full state, in exactly the
form the unsharded optimizer's ``state_dict()`` has; ``load_state_dict``
takes that form, or this rank's ``local_state_dict()``.
"""

from __future__ import annotations

import copy
import itertools
from collections import defaultdict
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

import torch

from ring_strategy.process_sets import averages_here
from ring_strategy.torch._async_ops import grouped_allgather_async, grouped_allreduce_, grouped_reducescatter_async
from ring_strategy.torch.compression import Compression
from ring_strategy.torch.grad_sync import check_passes
from ring_strategy.torch.mpi_ops import Average, Sum, allreduce, global_process_set, synchronize

__all__ = ["ShardedOptimizer", "shard_optimizer"]

_LOCAL = "ring_shard"  # the key that marks a local_state_dict() and holds (rank, size)
# Sharded optimizers are numbered in creation order, the same on every rank
# when every rank builds the same ones; the number names their reductions.
_numbers = itertools.count()


def _block(numel: int, rank: int, size: int) -> Tuple[int, int]:
    """(start, count) of ``rank``'s block of ``numel`` elements (reducescatter's split)."""
    per, extra = divmod(numel, size)
    return rank * per + min(rank, extra), per + (1 if rank < extra else 0)


# Most bytes of parameters one allgather brings back at once.
_GATHER_BYTES = 32 << 20


def _buckets(params: List[torch.Tensor], limit: int) -> List[List[int]]:
    """Consecutive indices of ``params`` in groups of at most ``limit`` bytes
    (a larger parameter alone); the same on every rank."""
    buckets: List[List[int]] = [[]]
    filled = 0
    for i, p in enumerate(params):
        nbytes = p.numel() * p.element_size()
        if buckets[-1] and filled + nbytes > limit:
            buckets.append([])
            filled = 0
        buckets[-1].append(i)
        filled += nbytes
    return [b for b in buckets if b]


def _block_of(p: torch.Tensor, start: int, count: int) -> torch.Tensor:
    """The tensor the wrapped optimizer steps for ``p``'s block: a view of
    ``p``'s own memory when it is contiguous (stepped in place), else a copy."""
    flat = p.detach().view(-1) if p.is_contiguous() else p.detach().reshape(-1).clone()
    return flat[start:start + count]


def _per_element(key: str, value: Any, p: torch.Tensor) -> bool:
    """Whether a full-form state entry has one value per element of ``p``: a
    tensor of ``p``'s shape, except a 0-dim parameter's ``step`` (torch's
    optimizers count steps under that key)."""
    return torch.is_tensor(value) and value.shape == p.shape and (p.dim() > 0 or key != "step")


class ShardedOptimizer(torch.optim.Optimizer):
    """Methods placed in front of the user's optimizer class in the MRO (see :func:`shard_optimizer`)."""

    _ring_params: List[torch.Tensor]
    _ring_blocks: List[Tuple[int, int]]
    _ring_rank: int
    _ring_size: int
    _ring_process_set: Any
    _ring_synchronized: bool
    _ring_name: str

    # ------------------------------------------------------------ the step
    def synchronize(self) -> None:
        """Reduce-scatters the accumulated gradients into this rank's blocks.

        A parameter whose ``.grad`` is None takes part with zeros (as with the
        unsharded optimizer; alone, its block's gradient stays None). The
        parameters' ``.grad`` are set to None.
        """
        grads = self._ring_full_grads()
        outs = grads
        if self._ring_size > 1:
            outs = synchronize(grouped_reducescatter_async(grads, name=f"{self._ring_name}.grads", op=Average,
                                                           process_set=self._ring_process_set))
        for shard, out in zip(self._ring_shards(), outs):
            shard.grad = None if out is None else out.reshape(-1)
        for p in self._ring_params:
            p.grad = None
        self._ring_synchronized = True

    def _ring_full_grads(self) -> List[Optional[torch.Tensor]]:
        """Every parameter's accumulated gradient, flat: zeros where ``.grad``
        is None when ranks reduce together, None when this rank steps alone."""
        self._ring_refresh_copies()
        grads: List[Optional[torch.Tensor]] = []
        for p in self._ring_params:
            if p.grad is not None and p.grad.is_sparse:
                raise NotImplementedError("shard_optimizer_state=True does not take sparse gradients")
            if p.grad is None:
                grads.append(torch.zeros(p.numel(), dtype=p.dtype, device=p.device) if self._ring_size > 1 else None)
            else:
                grads.append(p.grad.detach().reshape(-1))
        return grads

    def step(self, closure: Optional[Callable[[], Any]] = None) -> Any:
        """Runs ``closure`` (if given), reduces the gradients, steps this rank's
        blocks and gathers the updated parameters on every rank."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if not self._ring_synchronized:
            self.synchronize()
        self._ring_synchronized = False
        result = super().step()
        self._ring_gather_parameters()
        return loss if closure is not None else result

    def _ring_shards(self) -> List[torch.Tensor]:
        return [p for group in self.param_groups for p in group["params"]]

    def _ring_refresh_copies(self) -> None:
        """Copies the parameters into the blocks that are copies, not views (a
        non-contiguous parameter's): a checkpoint or an elastic restore may
        have loaded the parameters since the last step."""
        shards = self._ring_shards()
        with torch.no_grad():
            for i, p in enumerate(self._ring_params):
                start, count = self._ring_blocks[i]
                if not p.is_contiguous():
                    shards[i].copy_(p.reshape(-1)[start:start + count])

    def _ring_gather_parameters(self) -> None:
        """Allgathers the updated blocks into the parameters, a bucket of at
        most ``_GATHER_BYTES`` at a time (the gathered copies are transient)."""
        shards = [s.detach() for s in self._ring_shards()]
        params = self._ring_params
        if self._ring_size == 1:
            with torch.no_grad():
                for p, shard in zip(params, shards):
                    if shard.data_ptr() != p.data_ptr():
                        p.copy_(shard.view_as(p))
            return
        for number, bucket in enumerate(_buckets(params, _GATHER_BYTES)):
            fulls = synchronize(grouped_allgather_async([shards[i] for i in bucket],
                                                        name=f"{self._ring_name}.params.{number}",
                                                        process_set=self._ring_process_set))
            with torch.no_grad():
                for i, full in zip(bucket, fulls):
                    params[i].copy_(full.view_as(params[i]))

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clears the parameters' gradients and this rank's blocks of them."""
        super().zero_grad(set_to_none=set_to_none)
        for p in self._ring_params:
            if p.grad is not None:
                if set_to_none:
                    p.grad = None
                else:
                    p.grad.detach_().zero_()
        self._ring_synchronized = False

    def clip_grad_norm_(self, max_norm: float, norm_type: float = 2.0) -> torch.Tensor:
        """Clips the averaged gradients by their global norm, as
        ``torch.nn.utils.clip_grad_norm_`` on the unsharded gradients does.

        Two ways, by when it is called:

        - After :meth:`synchronize` (the gradients are this rank's averaged
          blocks): the global norm is computed across the shards, one scalar
          allreduce. Equal to torch's up to the rounding of the norm (summed
          in another order): bitwise the unsharded result when the norm is
          below ``max_norm`` (nothing is clipped), within that rounding else.
        - Before it (after the backward passes): the whole gradients are
          averaged with one grouped allreduce instead of the reducescatter,
          clipped by ``torch.nn.utils.clip_grad_norm_`` and cut into this
          rank's blocks. Bitwise the unsharded optimizer's result, for twice
          the gradient traffic of the reducescatter (Lightning's
          ``gradient_clip_val`` takes this way).

        Returns:
            The total norm of the averaged gradients before clipping.
        """
        if not self._ring_synchronized:
            return self._ring_clip_whole(max_norm, norm_type)
        grads = [s.grad for s in self._ring_shards() if s.grad is not None]
        local = torch.stack([g.detach().double().norm(norm_type) ** norm_type for g in grads]).sum() if grads \
            else torch.zeros((), dtype=torch.float64)
        if self._ring_size > 1:
            local = allreduce(local, op=Sum, name=f"{self._ring_name}.norm", process_set=self._ring_process_set)
        total = local ** (1.0 / norm_type)
        coef = (max_norm / (total + 1e-6)).clamp(max=1.0)
        for g in grads:
            g.mul_(coef.to(g.dtype))
        return total.float()

    def clip_grad_value_(self, clip_value: float) -> None:
        """Clamps the averaged gradients to ``[-clip_value, clip_value]``
        (reduce-scattering them first, if :meth:`synchronize` was not called):
        bitwise ``torch.nn.utils.clip_grad_value_`` on the unsharded gradients."""
        if not self._ring_synchronized:
            self.synchronize()
        for shard in self._ring_shards():
            if shard.grad is not None:
                shard.grad.clamp_(min=-clip_value, max=clip_value)

    def _ring_clip_whole(self, max_norm: float, norm_type: float) -> torch.Tensor:
        """:meth:`clip_grad_norm_` before :meth:`synchronize`: allreduce, clip, keep the blocks."""
        params = self._ring_params
        grads = self._ring_full_grads()
        for p, grad in zip(params, grads):
            p.grad = None if grad is None else grad.view_as(p)
        if self._ring_size > 1:
            grouped_allreduce_([p.grad for p in params], name=f"{self._ring_name}.whole", op=Average,
                               process_set=self._ring_process_set)
        total = torch.nn.utils.clip_grad_norm_(params, max_norm, norm_type)
        for shard, p, (start, count) in zip(self._ring_shards(), params, self._ring_blocks):
            shard.grad = None if p.grad is None else p.grad.detach().reshape(-1)[start:start + count].clone()
            p.grad = None
        self._ring_synchronized = True
        return total

    # ------------------------------------------------------------ state
    def local_state_dict(self) -> Dict[str, Any]:
        """This rank's state: the wrapped optimizer's ``state_dict()`` of its blocks."""
        state = super().state_dict()
        state[_LOCAL] = (self._ring_rank, self._ring_size)
        return state

    def state_dict(self) -> Dict[str, Any]:
        """The full state, gathered from every rank (collective: every rank must call it).

        Returns:
            What the unsharded optimizer's ``state_dict()`` returns: each
            per-element state tensor whole, in its parameter's shape.
        """
        local = super().state_dict()
        local["state"] = {index: dict(entries) for index, entries in local["state"].items()}  # not the live dicts
        pieces, where = [], []
        for index, p in enumerate(self._ring_params):
            count = self._ring_blocks[index][1]
            for key, value in sorted(local["state"].get(index, {}).items()):
                if torch.is_tensor(value) and value.dim() == 1 and value.shape[0] == count:
                    pieces.append(value.detach())
                    where.append((index, key))
        if self._ring_size > 1 and pieces:
            pieces = synchronize(grouped_allgather_async(pieces, name=f"{self._ring_name}.state",
                                                         process_set=self._ring_process_set))
        for (index, key), full in zip(where, pieces):
            local["state"][index][key] = full.reshape(self._ring_params[index].shape).clone()
        return local

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """Loads the full form (``state_dict()``, or an unsharded optimizer's) or this rank's ``local_state_dict()``.

        The state takes copies: ``state_dict`` is never changed by later steps
        (torch's own optimizers keep the tensors given, steps counters included).
        """
        state_dict = dict(state_dict)
        marker = state_dict.pop(_LOCAL, None)
        if marker is not None:
            if tuple(marker) != (self._ring_rank, self._ring_size):
                raise ValueError(f"load_state_dict: a local state of rank {marker[0]} of {marker[1]} cannot be "
                                 f"loaded by rank {self._ring_rank} of {self._ring_size}; load the full state_dict()")
            super().load_state_dict(copy.deepcopy(state_dict))
            return
        sliced = {}
        for index, per_param in state_dict["state"].items():
            p = self._ring_params[int(index)]
            start, count = self._ring_blocks[int(index)]
            sliced[index] = {key: value.reshape(-1)[start:start + count].clone() if _per_element(key, value, p)
                             else copy.deepcopy(value) for key, value in per_param.items()}
        super().load_state_dict({**state_dict, "state": sliced})

    def reshard(self, state_dict: Dict[str, Any], process_set: Any = None) -> None:
        """Cuts the parameters into blocks again for ``process_set``'s ranks as
        they are now, and loads ``state_dict`` into them. Local: no communication.

        What an elastic reset calls (the world's size and this rank's place in
        it may have changed), or a move to another process set.

        Args:
            state_dict: the full state (:meth:`state_dict`, taken in any
                layout, or an unsharded optimizer's); this rank's blocks of
                it become the state.
            process_set: the ranks that share the state from now on; None:
                the same set as before (its rank and size read again).
        """
        if state_dict.get(_LOCAL) is not None:
            raise ValueError("reshard: takes the full state_dict(), not a local_state_dict()")
        self._ring_lay_out(self._ring_process_set if process_set is None else process_set)
        self.load_state_dict(state_dict)

    def _ring_lay_out(self, process_set: Any) -> None:
        """Makes this rank's blocks of the parameters, for ``process_set``, the
        params of the param groups (the group dicts themselves are kept: a
        learning-rate scheduler holds them), with an empty state."""
        # A rank outside the set, or a set of one, steps alone (as the unsharded optimizer does).
        size, rank = (process_set.size(), process_set.rank()) if averages_here(process_set) else (1, 0)
        params = self._ring_params
        blocks = [_block(p.numel(), rank, size) for p in params]
        shards = iter(_block_of(p, start, count) for p, (start, count) in zip(params, blocks))
        for group in self.param_groups:
            group["params"] = [next(shards) for _ in group["params"]]
        self.state = defaultdict(dict)
        self._ring_blocks = blocks
        self._ring_rank, self._ring_size, self._ring_process_set = rank, size, process_set
        self._ring_synchronized = False

    def add_param_group(self, param_group: Dict[str, Any]) -> None:
        if getattr(self, "_ring_params", None) is not None:
            raise NotImplementedError("add_param_group: a sharded optimizer's groups are fixed at wrapping")
        super().add_param_group(param_group)


def shard_optimizer(
    optimizer: torch.optim.Optimizer,
    named_parameters: Optional[Iterable[Tuple[str, torch.Tensor]]] = None,
    *,
    compression: Any = Compression.none,
    op: int = Average,
    process_set: Any = global_process_set,
    name: Optional[str] = None,
    **unsupported: Any,
) -> torch.optim.Optimizer:
    """Wraps ``optimizer`` so that each rank keeps and steps only its block of every parameter.

    ``DistributedOptimizer(optimizer, ..., shard_optimizer_state=True)`` calls
    this (see the module docstring). The returned object is an instance of a
    subclass of ``type(optimizer)`` (``isinstance`` holds) that shares the
    original's param groups, whose parameters become this rank's blocks
    (keep using only the returned object); its state must be empty.

    Args:
        optimizer: the torch optimizer to wrap (per-element rules: SGD, Adam, ...).
        named_parameters: accepted for DistributedOptimizer's signature; the
            reductions are named by position.
        compression: only ``Compression.none``.
        op: only ``Average``.
        process_set: the ranks that share the state.
        name: names this optimizer's reductions; every rank must give the
            same. None: numbered in creation order (every rank must then make
            the same sharded optimizers in the same order).
        unsupported: other DistributedOptimizer arguments, which must keep
            their defaults (``backward_passes_per_step`` is free: passes
            accumulate until ``step()``).

    Raises:
        ValueError: an argument the sharded optimizer does not take, or an
            optimizer with state already.
    """
    _check_arguments(optimizer, compression, op, unsupported)
    del named_parameters  # names are positions, which every rank shares
    base = type(optimizer)
    cls = type(base.__name__, (ShardedOptimizer, base), {"__module__": base.__module__})
    sharded = cls.__new__(cls)
    for key, value in vars(optimizer).items():
        if not (callable(value) and hasattr(base, key)):
            setattr(sharded, key, value)
    sharded._ring_params = [p for group in optimizer.param_groups for p in group["params"]]
    sharded.param_groups = optimizer.param_groups
    sharded._ring_lay_out(process_set)
    sharded._ring_name = f"ShardedOptimizer.{next(_numbers)}" if name is None else f"ShardedOptimizer.{name}"
    return sharded


def _check_arguments(optimizer: torch.optim.Optimizer, compression: Any, op: int, unsupported: Dict[str, Any]) -> None:
    """Raises ValueError for what :func:`shard_optimizer` cannot do, quoting the values."""
    if isinstance(optimizer, ShardedOptimizer):
        raise ValueError("optimizer is already sharded; wrap the plain torch optimizer once")
    if compression is not Compression.none or op != Average:
        raise ValueError("shard_optimizer_state=True averages uncompressed gradients: leave compression and op "
                         f"at their defaults. Got: compression={compression!r}, op={op!r}")
    unsupported = dict(unsupported)
    check_passes(unsupported.pop("backward_passes_per_step", 1))
    bad = {k: v for k, v in unsupported.items() if k not in _DEFAULTS or _DEFAULTS[k] != v}
    if bad:
        raise ValueError(f"shard_optimizer_state=True does not take {sorted(bad)}. Got: {bad!r}")
    if optimizer.state:
        raise ValueError("shard_optimizer_state=True: wrap the optimizer before its first step (it has state)")


# DistributedOptimizer's other arguments, at the values that mean "not used".
_DEFAULTS: Dict[str, Any] = {"gradient_predivide_factor": 1.0, "groups": None, "sparse_as_dense": False,
                             "num_groups": None}
