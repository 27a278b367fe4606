"""The argument rules every front end shares (ring_strategy/_core/rules.py), and
every front end taking the same root ranks on real workers (numpy integers
included). See workers/frontend_core.py for the worker side."""

import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from ring_strategy import _native
from ring_strategy._core import rules
from ring_strategy.exceptions import BadArgumentError
from tests.workers.checks import passed_ranks

WORKER = Path(__file__).parent / "workers" / "frontend_core.py"


@pytest.mark.parametrize("root", [0, 3, -1, np.int64(2), np.int32(1), np.uint8(7), 2 ** 31 - 1])
def test_root_accepts_integers(root):
    got = rules.check_root(root)
    assert got == int(root) and type(got) is int


@pytest.mark.parametrize("root", [True, False, 0.0, 1.5, np.float32(1), "0", None, 2 ** 31, -(2 ** 31) - 1, [0]])
def test_root_refuses_the_rest(root):
    with pytest.raises(BadArgumentError, match="root_rank"):
        rules.check_root(root)


def test_ops_and_average_flag():
    assert rules.check_op(rules.Sum) == rules.Sum and rules.check_op(np.int64(rules.Max)) == rules.Max
    # Adasum is an engine op; its codes for the others are unchanged.
    assert rules.check_op(rules.Adasum) == rules.Adasum == _native.REDUCE_OPS["Adasum"]
    assert [rules.Sum, rules.Average, rules.Min, rules.Max, rules.Product] == [0, 1, 2, 3, 4]
    with pytest.raises(NotImplementedError, match="sparse_as_dense"):
        rules.check_sparse_op(rules.Adasum)
    rules.check_sparse_op(rules.Sum)
    for bad in (True, 42, "Sum", None, [0], np.zeros(2)):
        with pytest.raises(BadArgumentError, match="op should be one of"):
            rules.check_op(bad)
    assert rules.handle_average_backwards_compatibility(None, None) == rules.Average
    assert rules.handle_average_backwards_compatibility(rules.Min, None) == rules.Min
    with pytest.warns(DeprecationWarning, match="op"):
        assert rules.handle_average_backwards_compatibility(None, False) == rules.Sum
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert rules.handle_average_backwards_compatibility(None, True) == rules.Average
    with pytest.raises(ValueError, match="supersedes"):
        rules.handle_average_backwards_compatibility(rules.Sum, True)


def test_alltoall_splits():
    assert rules.alltoall_splits(None, 6, 3) == [2, 2, 2]
    assert rules.alltoall_splits(None, 0, 4) == [0, 0, 0, 0]
    with pytest.raises(BadArgumentError, match="divisible by size"):
        rules.alltoall_splits(None, 7, 3)
    for splits in ([1, 2, 3], (1, 2, 3), np.array([1, 2, 3], np.int64), np.array([[1], [2], [3]]), range(1, 4)):
        assert rules.alltoall_splits(splits, 6, 3) == [1, 2, 3]
    with pytest.raises(BadArgumentError, match="splits"):
        rules.alltoall_splits(["a", "b"], 2, 2)


def test_reducescatter_rows_split_as_evenly_as_possible():
    for rows in range(0, 12):
        for size in range(1, 5):
            counts = [rules.reducescatter_rows(rows, size, r) for r in range(size)]
            assert sum(counts) == rows and max(counts) - min(counts) <= 1 and counts == sorted(counts, reverse=True)
    with pytest.raises(BadArgumentError, match="at least one dimension"):
        rules.require_rows("reducescatter", 0)


@pytest.mark.parametrize("scenarios", [["roots_numpy", "roots_torch"], ["roots_tensorflow"]])
def test_every_front_end_takes_the_same_roots(ringrun, scenarios):
    proc = ringrun(2, [sys.executable, str(WORKER), *scenarios], timeout=180)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    for scenario in scenarios:
        assert len(passed_ranks(out, scenario)) == 2, out[-6000:]
