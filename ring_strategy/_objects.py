"""Python objects across ranks, for every front end: ``broadcast_object`` and
``allgather_object`` with the process set and root checked, over the
core's (:mod:`ring_strategy._core.objects`). Each takes two engine
operations named ``"<name>.sz"`` (the byte counts, int64) and ``"<name>.t"``
(the bytes, uint8); front ends pass their own default name.
"""

from __future__ import annotations

from typing import Any, List, Optional

from ring_strategy._core import objects
from ring_strategy._core.registry import global_process_set, place_of
from ring_strategy._core.rules import check_root


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
    place = place_of(process_set)
    return objects.broadcast_object(obj, check_root(root_rank), name or "broadcast_object", place.id)


def allgather_object(obj: Any, name: Optional[str] = None, process_set: Any = global_process_set) -> List[Any]:
    """Every rank's ``obj`` (the ranks of the set, ascending; objects may
    differ in type and size between ranks).

    Args:
        obj: any picklable object.
        name: names the two allgathers; the same on every rank
            ("allgather_object" when omitted).
        process_set: the ranks that take part.
    """
    return objects.allgather_object(obj, name or "allgather_object", place_of(process_set).id)
