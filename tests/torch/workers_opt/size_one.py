"""Every optimizer and functions scenario in a world of one (plain `python`, no launcher)."""

import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import functions_scenarios  # noqa: E402
import optimizer_scenarios  # noqa: E402

import ring_strategy.torch as hvd  # noqa: E402


def main():
    hvd.init()
    assert (hvd.rank(), hvd.size()) == (0, 1)
    failed = False
    for module in (optimizer_scenarios, functions_scenarios):
        for name, scenario in module.SCENARIOS.items():
            try:
                scenario()
            except Exception:
                failed = True
                print(f"0: {name} FAILED\n{traceback.format_exc()}", flush=True)
            else:
                print(f"0: {name} ok", flush=True)
    hvd.shutdown()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
