"""One collective goes down through the core (ring_strategy/_core) without
climbing back: each of its modules is entered at most once by one
allreduce, from numpy and from torch (issue 35). For torch that is the
front end resolving ``average=`` (rules), the set (registry), the names
(handles) and one submission (engine), which checks the op itself without
a call back into rules for an engine code. Counted with a profile hook in
a world of one."""

import collections
import sys

import numpy as np
import pytest

import ring_strategy as rs

CORE = ["world", "engine", "handles", "objects", "registry", "rules", "arrays", "gpu_arrays"]


def _entries(call):
    """How many times each core module is entered from outside it during ``call()``."""
    def module(frame):
        name = frame.f_globals.get("__name__", "") if frame is not None else ""
        return name[len("ring_strategy._core."):] if name.startswith("ring_strategy._core.") else None

    counts = collections.Counter()

    def hook(frame, event, _arg):
        if event == "call" and module(frame) and module(frame.f_back) != module(frame):
            counts[module(frame)] += 1

    sys.setprofile(hook)
    try:
        call()
    finally:
        sys.setprofile(None)
    return counts


@pytest.fixture
def world():
    rs.init()
    yield
    rs.shutdown()


def test_numpy_allreduce_enters_each_core_module_once(world):
    x = np.ones(8, np.float32)
    rs.allreduce(x, name="warm")
    counts = _entries(lambda: rs.allreduce(x, name="once"))
    assert counts and all(n == 1 for n in counts.values()), counts
    strided = _entries(lambda: rs.allreduce(np.ones(8, np.float32)[::2], op=rs.Sum, name="strided"))
    assert all(strided[m] <= 1 for m in CORE if m not in ("handles", "rules")), strided


def test_torch_allreduce_enters_each_core_module_once(world):
    torch = pytest.importorskip("torch")
    import ring_strategy.torch as hvd

    t = torch.ones(8)
    hvd.allreduce(t, name="warm")
    calls = {
        "allreduce": lambda: hvd.allreduce(t, name="once"),
        "allreduce_": lambda: hvd.allreduce_(t, op=hvd.Sum, name="inplace"),
        "grouped_allreduce": lambda: hvd.grouped_allreduce([t, t], name="grouped"),
    }
    for what, call in calls.items():
        counts = _entries(call)
        assert set(counts) == {"rules", "registry", "handles", "engine"}, (what, counts)
        assert all(n == 1 for n in counts.values()), (what, counts)
