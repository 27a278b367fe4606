"""The seam between elastic training loops and the job's membership.

Contract:
- ``reset()`` leaves the current world and joins the next one the launcher
  forms: afterwards ``ring_strategy.rank()`` / ``size()`` describe the new
  world. Without an elastic launcher the next world is the same ranks again.
- ``host_updates()`` says, without blocking and without communicating,
  whether the launcher has announced a change of hosts since this world
  began: ``(False, False)`` when not, ``(True, skip_sync)`` when it has
  (``skip_sync`` is True when hosts were only added).
"""

from __future__ import annotations

from typing import Tuple

from ring_strategy import basics


def reset() -> None:
    """Leaves this world and joins the next (see the module's contract)."""
    basics.shutdown()
    basics.init()


def host_updates() -> Tuple[bool, bool]:
    """Whether the hosts changed since this world began (see the module's contract)."""
    return False, False
