"""Checks docs/support.md's clauses on the installed front ends, in a world of one.

``python support_doc.py`` reads a JSON list of clauses on stdin, each
``{"front_end", "feature", "marker", "names"}`` (tests/test_support_doc.py
parses them from the page), and prints a JSON list of the clauses that are
not true, as readable lines. Markers:

- ``yes``: each name (dotted for a nested attribute) exists on the front end;
- ``no``: each name is absent;
- ``NotImplementedError`` / ``BadArgumentError``: the call in ``CALLS`` for
  the name raises that exception;
- ``returns False``: the name is a function returning False (or 0, as
  ``nccl_built`` does when no NCCL was found) on this machine.

The front end of the Lightning column is the ``RingStrategy`` class.
"""

from __future__ import annotations

import importlib
import json
import sys
from typing import Any, Callable, Dict, List, Tuple

import ring_strategy
from ring_strategy.exceptions import BadArgumentError

MODULES = {
    "numpy core": "ring_strategy",
    "PyTorch": "ring_strategy.torch",
    "TensorFlow": "ring_strategy.tensorflow",
    "Keras 3": "ring_strategy.keras",
    "Lightning": "ring_strategy.lightning",
    "MXNet": "ring_strategy.mxnet",
}
ERRORS = {"NotImplementedError": NotImplementedError, "BadArgumentError": BadArgumentError}


def _front_end(front_end: str) -> Any:
    module = importlib.import_module(MODULES[front_end])
    return module.RingStrategy if front_end == "Lightning" else module


def _not_every_rank(m: Any) -> Any:
    return m.ProcessSet(list(range(m.size() + 1)))


def _tf_optimizer(m: Any) -> Any:
    import tensorflow as tf

    return m.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1), op=m.Adasum)


def _tf_tape(m: Any) -> Any:
    import tensorflow as tf

    return m.DistributedGradientTape(tf.GradientTape(), op=m.Adasum)


def _keras_optimizer(m: Any) -> Any:
    import keras

    return m.DistributedOptimizer(keras.optimizers.SGD(0.1), op=ring_strategy.Adasum)


# The call that must raise, for each name a raising clause lists: by name on
# every front end, or by (front end, name).
CALLS: Dict[Any, Callable[[Any], Any]] = {
    "add_process_set": lambda m: m.add_process_set(_not_every_rank(m).ranks),
    "remove_process_set": lambda m: m.remove_process_set(m.global_process_set),
    "ProcessSet": lambda m: m.barrier(process_set=_not_every_rank(m)),
    ("numpy core", "run"): lambda m: m.run(int, np=1, min_np=1),
    ("TensorFlow", "DistributedOptimizer"): _tf_optimizer,
    ("TensorFlow", "DistributedGradientTape"): _tf_tape,
    ("Keras 3", "DistributedOptimizer"): _keras_optimizer,
}

_MISSING = object()


def _attribute(owner: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        owner = getattr(owner, part, _MISSING)
        if owner is _MISSING:
            return _MISSING
    return owner


def _raises(front_end: str, owner: Any, name: str, error: type) -> str:
    call = CALLS.get((front_end, name), CALLS.get(name))
    if call is None:
        return "the test has no call for it (add one to CALLS in tests/workers/support_doc.py)"
    if _attribute(owner, name) is _MISSING:
        return "it does not exist"
    try:
        call(owner)
    except error:
        return ""
    except Exception as e:  # noqa: BLE001 - reported as the clause's failure
        return f"it raised {type(e).__name__}: {e}"
    return "it did not raise"


def check(front_end: str, owner: Any, marker: str, name: str) -> str:
    """Why ``marker: name`` is not true of ``owner``, or ""."""
    value = _attribute(owner, name)
    if marker == "yes":
        return "it does not exist" if value is _MISSING else ""
    if marker == "no":
        return "" if value is _MISSING else "it exists"
    if marker == "returns False":
        return "it does not exist" if value is _MISSING else ("" if value() in (False, 0) else f"it returned {value()!r}")
    return _raises(front_end, owner, name, ERRORS[marker])


def main() -> None:
    clauses: List[Dict[str, Any]] = json.load(sys.stdin)
    ring_strategy.init()
    owners: Dict[str, Any] = {}
    problems: List[str] = []
    checked: List[Tuple[str, str]] = []
    for c in clauses:
        front_end = c["front_end"]
        if front_end not in owners:
            owners[front_end] = _front_end(front_end)
        for name in c["names"]:
            why = check(front_end, owners[front_end], c["marker"], name)
            checked.append((front_end, name))
            if why:
                problems.append(f"{front_end}, {c['feature']!r}: {c['marker']}: `{name}`: {why}")
    ring_strategy.shutdown()
    print(json.dumps({"checked": len(checked), "problems": problems}))


if __name__ == "__main__":
    main()
