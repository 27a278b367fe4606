"""Horovod behaviours scripts rely on, under ringrun: `python horovod_behaviours.py MODE`.

scenarios:  the named scenarios below on every rank (``<rank>: <name> ok``).
lost-exit:  rank 1 leaves without shutting down; rank 0 catches the error of
            its next collective as ``HorovodInternalError`` and prints
            ``caught HorovodInternalError: <class>: <message>``.
lost-stop:  rank 1 stops (SIGSTOP) during a transfer; the same on rank 0
            (after RING_TIMEOUT_SECONDS), which then kills rank 1.
"""

import os
import signal
import sys
import time

import numpy as np

import ring_strategy as rs
from ring_strategy.exceptions import HorovodInternalError
from tests.workers.checks import equal, raises, run_scenarios


def name_free_once_completed():
    """A name is free again once its operation has completed (poll says
    done), without synchronize; a duplicate while the first is still in
    flight is a BadArgumentError."""
    n, me = rs.size(), rs.rank()
    x = np.full(3, me + 1, np.float32)
    first = rs.allreduce_async(x, op=rs.Sum, name="reused")
    while not rs.poll(first):
        pass
    second = rs.allreduce_async(x * 2, op=rs.Sum, name="reused")  # not synchronized: completed is enough
    equal(rs.synchronize(second), np.full(3, n * (n + 1), np.float32), "second")
    equal(rs.synchronize(first), np.full(3, n * (n + 1) / 2, np.float32), "first")
    # Rank 0 holds "held" in flight: the others submit it only after a
    # barrier rank 0 reaches after its checks.
    if me == 0:
        held = rs.allreduce_async(x, op=rs.Sum, name="held")
        raises(rs.BadArgumentError, lambda: rs.allreduce_async(x, name="held"), "'held'", "already in flight")
    rs.barrier()
    if me != 0:
        held = rs.allreduce_async(x, op=rs.Sum, name="held")
    equal(rs.synchronize(held), np.full(3, n * (n + 1) / 2, np.float32), "held")


def horovod_variables():
    """The variables horovodrun sets, equal to ours and to the job's layout."""
    from ring_strategy import _contracts as names

    for alias, ours in names.HOROVOD_ALIASES.items():
        assert os.environ.get(alias) == os.environ[ours], (alias, os.environ.get(alias), os.environ[ours])
    layout = [int(os.environ[f"HOROVOD_{k}"]) for k in ("RANK", "SIZE", "LOCAL_RANK", "LOCAL_SIZE",
                                                          "CROSS_RANK", "CROSS_SIZE")]
    assert layout == [rs.rank(), rs.size(), rs.local_rank(), rs.local_size(), rs.cross_rank(), rs.cross_size()], layout
    assert os.environ["HOROVOD_HOSTNAME"], "empty HOROVOD_HOSTNAME"


SCENARIOS = {f.__name__: f for f in [name_free_once_completed, horovod_variables]}


# 128 MiB of float32: a transfer long enough that rank 1 stops in the middle
# of it (a stop between collectives would be a stall, not a timeout).
ELEMENTS = 1 << 25


def lost(how: str) -> None:
    me = rs.rank()
    big = np.ones(ELEMENTS, np.float32)
    pids = rs.allgather(np.array([os.getpid()], np.int64))
    rs.allreduce(big, name="lost.warmup")
    if me == 1:
        if how == "exit":
            os._exit(0)
        rs.allreduce_async(big, name="lost.big")
        time.sleep(0.01)  # negotiated by now; the transfer is under way
        os.kill(os.getpid(), signal.SIGSTOP)
        return
    try:
        rs.allreduce(big, name="lost.big")
    except HorovodInternalError as e:
        print(f"caught HorovodInternalError: {type(e).__name__}: {e}", flush=True)
    finally:
        if how == "stop":
            os.kill(int(pids[1]), signal.SIGKILL)
    os._exit(0)


def main() -> None:
    mode = sys.argv[1]
    rs.init()
    if mode.startswith("lost-"):
        lost(mode[len("lost-"):])
        return
    ok = run_scenarios(SCENARIOS, sys.argv[2:] or list(SCENARIOS), rs.rank(), after_each=rs.barrier)
    rs.shutdown()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
