"""Hosts an elastic job no longer places workers on, because a worker failed there.

Without a cooldown a host is out for good. With ``--blacklist-cooldown-range
MIN MAX`` it is out for a time drawn uniformly from [MIN, MAX] seconds, and
then may run workers again.
"""

from __future__ import annotations

import math
import random
import time
from typing import Callable, Dict, List, Optional, Tuple

__all__ = ["Blacklist"]


class Blacklist:
    """The hosts where a worker failed.

    Args:
        cooldown: ``(MIN, MAX)`` seconds a host stays out, or None for good.
        clock: Monotonic seconds (for tests).
    """

    def __init__(self, cooldown: Optional[Tuple[float, float]] = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.cooldown = cooldown
        self._clock = clock
        self._until: Dict[str, float] = {}

    def add(self, host: str) -> float:
        """Takes ``host`` out; returns for how many seconds (inf: for good)."""
        seconds = math.inf if self.cooldown is None else random.uniform(*self.cooldown)
        self._until[host.lower()] = self._clock() + seconds
        return seconds

    def blocked(self, host: str) -> bool:
        """Whether ``host`` is out now."""
        return self._clock() < self._until.get(host.lower(), -math.inf)

    def expiring(self) -> List[str]:
        """Hosts whose cooldown has ended since the last call (each once)."""
        now = self._clock()
        back = [h for h, until in self._until.items() if until <= now]
        for host in back:
            del self._until[host]
        return back

    def hosts(self) -> List[str]:
        """The hosts out now."""
        return sorted(h for h in self._until if self.blocked(h))
