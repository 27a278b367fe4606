"""Keeping replicas identical: broadcast of parameters, optimizer state and
Python objects, and allgather of Python objects, as in Horovod.

Typical start of a training script::

    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Tuple

import torch

from ring_strategy import _objects
from ring_strategy.basics import rank
from ring_strategy.process_sets import global_process_set
from ring_strategy.torch._async_ops import broadcast_async_, synchronize

__all__ = ["broadcast_parameters", "broadcast_optimizer_state", "broadcast_object", "allgather_object"]


def _as_pairs(params: Any) -> List[Tuple[Optional[str], Any]]:
    if isinstance(params, Mapping):
        return sorted(params.items(), key=lambda kv: str(kv[0]))
    if isinstance(params, torch.Tensor) or isinstance(params, (str, bytes)):
        raise ValueError(f"invalid params of type: {type(params).__name__}")
    try:
        items = list(params)
    except TypeError:
        raise ValueError(f"invalid params of type: {type(params).__name__}") from None
    return [p if isinstance(p, tuple) else (None, p) for p in items]


def broadcast_parameters(params: Any, root_rank: int, process_set: Any = global_process_set) -> None:
    """Overwrites ``params`` in place with those of ``root_rank``.

    Args:
        params: ``model.state_dict()`` (a mapping name -> tensor, buffers
            included), ``model.named_parameters()`` (name, tensor pairs) or a
            list of tensors. Every rank must pass the same structure.
        root_rank: the rank whose values everyone takes.
        process_set: the ranks that take part.

    Raises:
        ValueError: ``params`` is not one of the above, or holds a value that
            is not a tensor.
    """
    pairs = _as_pairs(params)
    handles = []
    for i, (name, p) in enumerate(pairs):
        if not isinstance(p, torch.Tensor):
            raise ValueError(
                f"broadcast_parameters: {name if name is not None else f'item {i}'!r} is a "
                f"{type(p).__name__}, not a tensor"
            )
        # Named like Horovod (the key), under a prefix so that a gradient
        # reduction of the same parameter name can never meet it in flight.
        label = f"broadcast_parameters.{name}" if name is not None else None
        # detach(): the same storage, so parameters that require grad can be
        # written in place.
        handles.append(broadcast_async_(p.detach(), root_rank, name=label, process_set=process_set))
    for h in handles:
        synchronize(h)


def broadcast_object(obj: Any, root_rank: int = 0, name: Optional[str] = None,
                     process_set: Any = global_process_set) -> Any:
    """Returns ``root_rank``'s ``obj`` on every rank (pickled, then broadcast).

    Args:
        obj: any picklable object; ignored on the other ranks.
        root_rank: the rank whose object everyone receives.
        name: names the two broadcasts (size, then payload). Every rank must
            use the same one; the default is the same on every rank, whatever
            the type of ``obj`` there.
        process_set: the ranks that take part.

    Returns:
        The root's object (the root gets ``obj`` itself back).
    """
    return _objects.broadcast_object(obj, root_rank, name or "broadcast_object", process_set)


def allgather_object(obj: Any, name: Optional[str] = None, process_set: Any = global_process_set) -> List[Any]:
    """Returns the list of every rank's ``obj``, in rank order.

    Args:
        obj: any picklable object (may differ in type and size between ranks).
        name: names the two allgathers; the same on every rank.
        process_set: the ranks that take part.
    """
    return _objects.allgather_object(obj, name or "allgather_object", process_set)


def broadcast_optimizer_state(optimizer: torch.optim.Optimizer, root_rank: int,
                              process_set: Any = global_process_set) -> None:
    """Makes every rank's optimizer state and hyper-parameters ``root_rank``'s.

    Hyper-parameters of every param group (lr, betas, weight_decay, flags:
    any picklable value, exactly) and the per-parameter state (tensors such
    as momentum buffers, broadcast in place; other values such as step
    counts) become the root's; state the root does not have is dropped.

    A rank whose optimizer has no state yet (a fresh optimizer) first
    initialises it as Horovod does: every parameter that requires grad gets
    a gradient of zeros (which stays afterwards) and the optimizer takes one
    step on them, without averaging across ranks for a DistributedOptimizer.
    The parameters are then put back as they were, so a step that moves them
    even with zero gradients (weight decay) leaves no trace. LBFGS, whose
    step needs a closure, takes no such step: it gets the root's state as it
    is.

    Args:
        optimizer: a torch optimizer or a DistributedOptimizer, over the same
            parameters (same order and shapes) on every rank.
        root_rank: the rank whose state everyone takes.
        process_set: the ranks that take part.

    Raises:
        ValueError: on every rank, when the optimizers' param groups do not
            match the root's.
    """
    params = [p for group in optimizer.param_groups for p in group["params"]]
    if not any(optimizer.state.get(p) for p in params) and not isinstance(optimizer, torch.optim.LBFGS):
        _initialise_state(optimizer, params)
    signature = [
        [(tuple(p.shape), str(p.dtype)) for p in group["params"]] for group in optimizer.param_groups
    ]
    payload = None
    if rank() == root_rank:
        payload = {
            "signature": signature,
            "options": [{k: v for k, v in group.items() if k != "params"} for group in optimizer.param_groups],
            "state": _state_skeleton(optimizer, params),
        }
    payload = broadcast_object(payload, root_rank, name="broadcast_optimizer_state.skeleton", process_set=process_set)
    agree = allgather_object(payload["signature"] == signature, name="broadcast_optimizer_state.check",
                             process_set=process_set)
    if not all(agree):
        differ = [i for i, ok in enumerate(agree) if not ok]
        raise ValueError(
            f"broadcast_optimizer_state: the param groups (count, parameter shapes or dtypes) differ from "
            f"root rank {root_rank}'s on ranks {differ}"
        )

    if rank() != root_rank:
        for group, options in zip(optimizer.param_groups, payload["options"]):
            for key in [k for k in group if k != "params" and k not in options]:
                del group[key]
            group.update(options)
    tensors = _apply_skeleton(optimizer, params, payload["state"])
    handles = [
        broadcast_async_(t, root_rank, name=f"broadcast_optimizer_state.{index}.{key}", process_set=process_set)
        for index, key, t in tensors
    ]
    for h in handles:
        synchronize(h)


def _initialise_state(optimizer: torch.optim.Optimizer, params: List[torch.Tensor]) -> None:
    """One local step on zero gradients creates the optimizer's state; the
    parameters are restored afterwards. A DistributedOptimizer steps through
    its ``_ring_local_step`` (the wrapped optimizer's own step, no
    collective); any other optimizer through ``step``."""
    trained = [p for p in params if p.requires_grad]
    saved = [p.detach().clone() for p in trained]
    for p in trained:
        p.grad = torch.zeros_like(p)
    getattr(optimizer, "_ring_local_step", optimizer.step)()
    with torch.no_grad():
        for p, before in zip(trained, saved):
            p.copy_(before)


def _state_skeleton(optimizer: torch.optim.Optimizer, params: List[torch.Tensor]) -> Dict[int, Dict[Any, Any]]:
    """{parameter index: {key: ("tensor", shape, dtype, on param's device) | ("value", value)}}."""
    skeleton: Dict[int, Dict[Any, Any]] = {}
    for index, p in enumerate(params):
        state = optimizer.state.get(p)
        if not state:
            continue
        entry = {}
        for key, value in state.items():
            if isinstance(value, torch.Tensor):
                entry[key] = ("tensor", tuple(value.shape), value.dtype, value.device == p.device)
            else:
                entry[key] = ("value", value)
        skeleton[index] = entry
    return skeleton


def _apply_skeleton(
    optimizer: torch.optim.Optimizer, params: List[torch.Tensor], skeleton: Dict[int, Dict[Any, Any]]
) -> List[Tuple[int, Any, torch.Tensor]]:
    """Shapes this rank's state like the root's; returns the tensors to broadcast
    into, as (parameter index, key, tensor) in a fixed order."""
    tensors = []
    for index, p in enumerate(params):
        wanted = skeleton.get(index)
        if wanted is None:
            optimizer.state.pop(p, None)
            continue
        state = optimizer.state[p]
        for key in [k for k in state if k not in wanted]:
            del state[key]
        for key, spec in wanted.items():
            if spec[0] == "value":
                state[key] = spec[1]
                continue
            _, shape, dtype, on_param_device = spec
            current = state.get(key)
            if not (isinstance(current, torch.Tensor) and tuple(current.shape) == shape and current.dtype == dtype):
                device = p.device if on_param_device else torch.device("cpu")
                current = torch.zeros(shape, dtype=dtype, device=device)
                state[key] = current
            target = current.detach()
            if target.dim() == 0:
                target = target.view(1)  # same storage; some engines want at least one dimension
            tensors.append((index, key, target))
    return tensors
