"""Every optimizer and functions scenario in a world of one (plain `python`, no launcher)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import functions_scenarios  # noqa: E402
import optimizer_scenarios  # noqa: E402

import ring_strategy.torch as hvd  # noqa: E402
from tests.workers.checks import run_scenarios  # noqa: E402


def main():
    hvd.init()
    assert (hvd.rank(), hvd.size()) == (0, 1)
    passed = [run_scenarios(module.SCENARIOS, list(module.SCENARIOS), 0)
              for module in (optimizer_scenarios, functions_scenarios)]
    hvd.shutdown()
    sys.exit(0 if all(passed) else 1)


if __name__ == "__main__":
    main()
