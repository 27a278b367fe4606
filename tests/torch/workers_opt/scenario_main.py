"""The main() of the worker scripts here: runs the scenarios named on the
command line (all when none), printing "<rank>: <name> ok" or FAILED with the
traceback, and exits non-zero when any failed."""

import sys
import time
import traceback

import ring_strategy.torch as hvd


def run_scenarios(scenarios: dict) -> None:
    hvd.init()
    failed = False
    for name in sys.argv[1:] or list(scenarios):
        start = time.perf_counter()
        try:
            scenarios[name]()
        except Exception:
            failed = True
            print(f"{hvd.rank()}: {name} FAILED\n{traceback.format_exc()}", flush=True)
        else:
            print(f"{hvd.rank()}: {name} ok", flush=True)
            print(f"{hvd.rank()}: {name} took {time.perf_counter() - start:.2f} s", flush=True)
    hvd.shutdown()
    sys.exit(1 if failed else 0)
