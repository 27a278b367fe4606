"""Checks the worker scripts share (imported as ``tests.workers.checks``;
every job of the suite has this checkout on ``PYTHONPATH``).

- :func:`raises`: a call must raise a given error mentioning given text.
- :func:`equal`, :func:`close`: a result against what numpy (or a
  single-process run) says it should be; numpy arrays, torch and
  TensorFlow tensors alike.
- :func:`identical_rows`: every rank's row of an allgather is the same
  (replicas did not diverge).
- :func:`run_scenarios`: runs named scenarios on this rank and prints
  ``<rank>: <name> ok`` or ``<rank>: <name> FAILED: ...`` for the test to read.

Nothing here imports a framework.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from typing import Any, Callable, Iterable, List, Mapping, Optional, Tuple, Type, Union

import numpy as np

__all__ = ["close", "equal", "identical_rows", "passed_ranks", "raises", "run_scenarios"]

_Errors = Union[Type[BaseException], Tuple[Type[BaseException], ...]]
_HALF = ("float16", "bfloat16")


def raises(error: _Errors, call: Callable[[], Any], *fragments: str) -> BaseException:
    """Runs ``call()``, which must raise ``error`` with every fragment in its message.

    Returns:
        The exception.
    """
    try:
        got = call()
    except error as e:
        missing = [f for f in fragments if f not in str(e)]
        assert not missing, f"{type(e).__name__} without {missing}: {e}"
        return e
    names = error.__name__ if isinstance(error, type) else " or ".join(e.__name__ for e in error)
    raise AssertionError(f"no {names} from {call} (returned {got!r}); expected one mentioning {list(fragments)}")


def _dtype(x: Any) -> str:
    """``float32``, ``bfloat16``, ...: the same name for numpy, torch and TensorFlow."""
    dtype = getattr(x, "dtype", None)
    return str(getattr(dtype, "name", None) or dtype).replace("torch.", "")


def _numpy(x: Any) -> np.ndarray:
    """``x`` as a numpy array (torch's 16-bit brain floats through float32, which holds them exactly)."""
    if hasattr(x, "detach"):  # torch
        x = x.detach().cpu()
        if _dtype(x) == "bfloat16":
            x = x.float()
        return x.numpy()
    if hasattr(x, "numpy") and not isinstance(x, np.ndarray):  # TensorFlow
        return np.asarray(x.numpy())
    return np.asarray(x)


def _same_kind(got: Any, want: Any, what: str, dtype: bool) -> Tuple[np.ndarray, np.ndarray]:
    a, b = _numpy(got), _numpy(want)
    assert a.shape == b.shape, f"{what}: shape {a.shape} != {b.shape}"
    if dtype:
        assert _dtype(got) == _dtype(want), f"{what}: dtype {_dtype(got)} != {_dtype(want)}"
    return a, b


def equal(got: Any, want: Any, what: str = "", *, dtype: bool = True) -> None:
    """``got`` equals ``want`` exactly: shape, values and (with ``dtype``) dtype."""
    a, b = _same_kind(got, want, what, dtype)
    assert np.array_equal(a, b), f"{what}: got {a.reshape(-1)[:8]}, want {b.reshape(-1)[:8]}"


def close(got: Any, want: Any, what: str = "", *, rtol: float = 1e-6, atol: float = 1e-6, dtype: bool = True) -> None:
    """``got`` equals ``want`` up to rounding (results that divide, or go
    through 16 bits: then ``rtol`` is at least 1e-2)."""
    a, b = _same_kind(got, want, what, dtype)
    if _dtype(got) in _HALF or _dtype(want) in _HALF:
        rtol = max(rtol, 1e-2)
    ok = np.allclose(a.astype(np.float64), b.astype(np.float64), rtol=rtol, atol=atol)
    assert ok, f"{what}: got {a.reshape(-1)[:8]}, want {b.reshape(-1)[:8]} (rtol {rtol:g}, atol {atol:g})"


def identical_rows(gathered: Any, what: str = "replicas") -> None:
    """Every row of ``gathered`` (one per rank, from an allgather) is the first one."""
    rows = _numpy(gathered)
    assert all(np.array_equal(rows[0], row) for row in rows), f"{what}: ranks differ"


def run_scenarios(scenarios: Mapping[str, Callable[[], Any]], names: Iterable[str], rank: Any, *,
                  stop_at_failure: bool = False, after_each: Optional[Callable[[], Any]] = None) -> bool:
    """Runs the scenarios ``names`` in order and prints one line for each.

    ``<rank>: <name> ok`` (then ``<rank>: <name> took T s``) when it
    returns, ``<rank>: <name> FAILED: <error>`` with its traceback when it
    raises. With ``stop_at_failure`` the process then ends at once with
    status 1 (the launcher stops the other ranks, which may be waiting for
    this one in a collective); otherwise the next scenario runs.

    Args:
        scenarios: The scenarios by name.
        names: Which to run.
        rank: This process's rank, as printed.
        stop_at_failure: End the process at the first failure.
        after_each: Called after each scenario that passed (a barrier, say).

    Returns:
        Whether every scenario passed.
    """
    passed = True
    for name in names:
        start = time.perf_counter()
        try:
            scenarios[name]()
            if after_each is not None:
                after_each()
        except Exception as e:  # noqa: BLE001 - reported, then the caller decides
            print(f"{rank}: {name} FAILED: {type(e).__name__}: {e}\n{traceback.format_exc()}", flush=True)
            if stop_at_failure:
                sys.stderr.flush()
                os._exit(1)
            passed = False
            continue
        print(f"{rank}: {name} ok", flush=True)
        print(f"{rank}: {name} took {time.perf_counter() - start:.2f} s", flush=True)
    return passed


def passed_ranks(output: str, scenario: str) -> List[str]:
    """The ranks, as printed, whose :func:`run_scenarios` line in ``output``
    says ``scenario`` passed (``<rank>: <scenario> ok``, also behind a
    launcher's ``[<rank>] `` prefix); one entry per such line."""
    suffix = f": {scenario} ok"
    return [line[: -len(suffix)].rsplit(" ", 1)[-1].rsplit("]", 1)[-1]
            for line in output.splitlines() if line.endswith(suffix)]
