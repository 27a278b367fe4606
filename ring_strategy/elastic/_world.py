"""The seam between elastic training loops and the job's membership.

Contract:
- ``reset()`` leaves the current world and joins the next one the launcher
  forms: afterwards ``ring_strategy.rank()`` / ``size()`` describe the new
  world. Without an elastic launcher the next world is the same ranks again.
  Under ``ringrun``'s elastic driver it blocks until the driver has formed a
  world after this process's last one (up to ``RING_ELASTIC_TIMEOUT``), and
  a worker the driver removed from the job leaves through
  :class:`~ring_strategy.environments.elastic.WorkerRemoved` (a
  ``SystemExit`` with status 0).
- ``host_updates()`` says, without blocking and without communicating,
  whether the launcher has announced a change of hosts since this world
  began: ``(False, False)`` when not, ``(True, skip_sync)`` when it has
  (``skip_sync`` is True when workers were only removed, so every member of
  the next world already holds the same state). It reports this process's
  own knowledge; ranks may learn it at different times.
"""

from __future__ import annotations

import sys
from typing import Tuple

from ring_strategy import basics
from ring_strategy.environments import elastic
from ring_strategy.exceptions import RingError


def reset() -> None:
    """Leaves this world and joins the next (see the module's contract).

    Under the elastic driver, a world that cannot form (a member lost while
    it forms: the rendezvous fails or times out) is left in turn for the
    next one; an error while waiting for a world is raised.
    """
    basics.shutdown()
    while True:
        elastic.ask_for_next_world()
        elastic.leave_world()
        before = elastic.current_generation()
        try:
            basics.init()
            return
        except (RingError, TimeoutError, ConnectionError) as e:
            if elastic.current_generation() == before:
                raise  # no world to join, or not an elastic job
            print(f"ring: world {elastic.current_generation()} did not form ({e}); waiting for the next",
                  file=sys.stderr, flush=True)


def host_updates() -> Tuple[bool, bool]:
    """Whether the hosts changed since this world began (see the module's contract)."""
    return elastic.host_updates()
