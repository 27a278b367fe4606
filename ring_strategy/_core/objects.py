"""Layer 5 of the core: Python objects across ranks, on the host.

``broadcast_object`` and ``allgather_object`` pickle the object and move the
bytes with two synchronous engine operations named ``"<name>.sz"`` (the
byte counts, int64) and ``"<name>.t"`` (the bytes, uint8). They take the
engine id of a process set, not a ``ProcessSet``: the registry
(:mod:`ring_strategy._core.registry`, above) agrees on registrations with
them, and :mod:`ring_strategy._objects` gives them to the front ends with
the set checked.
"""

from __future__ import annotations

import pickle
from typing import Any, List

import numpy as np

from ring_strategy._core import engine, world

_INT64 = engine.DTYPES["int64"]
_UINT8 = engine.DTYPES["uint8"]


def _pickled(obj: Any) -> np.ndarray:
    return np.frombuffer(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), dtype=np.uint8)


def _broadcast(arr: np.ndarray, code: int, root: int, name: str, set_id: int) -> np.ndarray:
    out = np.empty(arr.shape, arr.dtype)
    engine.submit(engine.BROADCAST, name, arr, out, code, root=root, process_set=set_id, sync=True,
                  keep=(arr, out), results=False)
    return out


def _allgather(arr: np.ndarray, code: int, name: str, set_id: int) -> np.ndarray:
    (data, shape, _), = engine.submit(engine.ALLGATHER, name, arr, None, code, process_set=set_id, sync=True,
                                      keep=arr)
    return data.view(arr.dtype).reshape(shape)


def broadcast_object(obj: Any, root: int, name: str, set_id: int) -> Any:
    """``root``'s ``obj`` on every rank of set ``set_id`` (the root gets
    ``obj`` itself); ``root`` is a checked global rank in the set."""
    if world.env().rank == root:  # once per object, not per operation
        payload = _pickled(obj)
        _broadcast(np.array([payload.size], dtype=np.int64), _INT64, root, f"{name}.sz", set_id)
        _broadcast(payload, _UINT8, root, f"{name}.t", set_id)
        return obj
    length = _broadcast(np.zeros(1, dtype=np.int64), _INT64, root, f"{name}.sz", set_id)
    payload = _broadcast(np.zeros(int(length[0]), dtype=np.uint8), _UINT8, root, f"{name}.t", set_id)
    return pickle.loads(payload.tobytes())


def allgather_object(obj: Any, name: str, set_id: int) -> List[Any]:
    """Every rank's ``obj`` (the ranks of set ``set_id``, ascending)."""
    payload = _pickled(obj)
    sizes = _allgather(np.array([payload.size], dtype=np.int64), _INT64, f"{name}.sz", set_id)
    data = _allgather(payload, _UINT8, f"{name}.t", set_id)
    out, offset = [], 0
    for n in sizes.tolist():
        out.append(pickle.loads(data[offset:offset + n].tobytes()))
        offset += n
    return out
