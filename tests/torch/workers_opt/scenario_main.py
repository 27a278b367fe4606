"""The main() of the worker scripts here: runs the scenarios named on the
command line (all when none) with tests/workers/checks.py's runner, and exits
non-zero when any failed."""

import sys

import ring_strategy.torch as hvd
from tests.workers.checks import run_scenarios


def run_all(scenarios: dict) -> None:
    hvd.init()
    passed = run_scenarios(scenarios, sys.argv[1:] or list(scenarios), hvd.rank())
    hvd.shutdown()
    sys.exit(0 if passed else 1)
