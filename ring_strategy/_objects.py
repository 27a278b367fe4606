"""Python objects across ranks, for every front end: ``broadcast_object`` and
``allgather_object`` pickle the object and move the bytes with the numpy
core's collectives. Each takes two engine operations named
``"<name>.sz"`` (the byte counts, int64) and ``"<name>.t"`` (the bytes,
uint8); front ends pass their own default name.
"""

from __future__ import annotations

import pickle
from typing import Any, List, Optional

import numpy as np

from ring_strategy import ops
from ring_strategy._rules import check_root
from ring_strategy.basics import rank
from ring_strategy.process_sets import _check_process_set, global_process_set


def _pickled(obj: Any) -> np.ndarray:
    return np.frombuffer(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), dtype=np.uint8)


def broadcast_object(obj: Any, root_rank: Any = 0, name: Optional[str] = None,
                     process_set: Any = global_process_set) -> Any:
    """``root_rank``'s ``obj`` on every rank of the set (the root gets ``obj`` itself).

    Args:
        obj: any picklable object; ignored on the other ranks.
        root_rank: the (global) rank whose object everyone receives.
        name: names the two broadcasts; the same on every rank
            ("broadcast_object" when omitted).
        process_set: the ranks that take part.
    """
    _check_process_set(process_set)
    name = name or "broadcast_object"
    root_rank = check_root(root_rank)
    if rank() == root_rank:
        payload = _pickled(obj)
        ops.broadcast(np.array([payload.size], dtype=np.int64), root_rank, name=f"{name}.sz", process_set=process_set)
        ops.broadcast(payload, root_rank, name=f"{name}.t", process_set=process_set)
        return obj
    length = ops.broadcast(np.zeros(1, dtype=np.int64), root_rank, name=f"{name}.sz", process_set=process_set)
    payload = ops.broadcast(
        np.zeros(int(length[0]), dtype=np.uint8), root_rank, name=f"{name}.t", process_set=process_set
    )
    return pickle.loads(payload.tobytes())


def allgather_object(obj: Any, name: Optional[str] = None, process_set: Any = global_process_set) -> List[Any]:
    """Every rank's ``obj`` (the ranks of the set, ascending; objects may
    differ in type and size between ranks).

    Args:
        obj: any picklable object.
        name: names the two allgathers; the same on every rank
            ("allgather_object" when omitted).
        process_set: the ranks that take part.
    """
    _check_process_set(process_set)
    name = name or "allgather_object"
    payload = _pickled(obj)
    sizes = ops.allgather(np.array([payload.size], dtype=np.int64), name=f"{name}.sz", process_set=process_set)
    data = ops.allgather(payload, name=f"{name}.t", process_set=process_set)
    out, offset = [], 0
    for n in sizes.tolist():
        out.append(pickle.loads(data[offset:offset + n].tobytes()))
        offset += n
    return out
