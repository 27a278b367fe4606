"""Where an elastic job may place workers: a host discovery script, or a fixed host list.

``--host-discovery-script`` is run with the shell about once a second
(``--discovery-interval``); each line it prints names one host that may run
workers now, as ``host`` or ``host:slots`` (``--slots-per-host`` for lines
without slots, 1 by default). Blank lines and everything after a ``#`` are
ignored. A host that stops being listed is taken out of the job; listed
again, it gets workers again. A script that fails, hangs or prints a bad
line changes nothing: the last good answer stands and ringrun says why.
"""

from __future__ import annotations

import subprocess
from typing import List, Sequence

from ring_strategy.runner.hosts import HostSlots, parse_hosts

__all__ = ["DiscoveryError", "FixedHosts", "HostDiscovery", "parse_discovery"]


class DiscoveryError(Exception):
    """The discovery script failed or printed something that is not a host list."""


def _has_slots(entry: str) -> bool:
    if entry.startswith("["):
        return "]:" in entry
    return entry.count(":") == 1


def parse_discovery(text: str, default_slots: int) -> List[HostSlots]:
    """The hosts of a discovery script's output.

    Args:
        text: What the script printed.
        default_slots: Slots of a host printed without ``:slots``.

    Returns:
        The hosts, in order.

    Raises:
        DiscoveryError: Quoting the bad line, or naming a host listed twice.
    """
    hosts: List[HostSlots] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        try:
            if "," in line:
                raise ValueError(f"one host a line, as host[:slots]. Got: {line!r}")
            (host,) = parse_hosts(line)
        except ValueError as e:
            raise DiscoveryError(f"line {number}: {e}") from None
        if not _has_slots(line):
            host = HostSlots(host.hostname, default_slots)
        if any(h.hostname.lower() == host.hostname.lower() for h in hosts):
            raise DiscoveryError(f"line {number}: host {host.hostname!r} is listed more than once")
        hosts.append(host)
    return hosts


class HostDiscovery:
    """Runs a host discovery script.

    Args:
        script: The command line, run with ``/bin/sh -c``.
        default_slots: Slots of a host printed without ``:slots``.
        timeout: Seconds the script may run.
    """

    def __init__(self, script: str, default_slots: int = 1, timeout: float = 10.0) -> None:
        self.script = script
        self.default_slots = default_slots
        self.timeout = timeout

    def discover(self) -> List[HostSlots]:
        """Runs the script once and returns the hosts it lists.

        Raises:
            DiscoveryError: If the script cannot run, fails, times out or
                prints a bad line; the message says which.
        """
        try:
            done = subprocess.run(
                ["/bin/sh", "-c", self.script], stdin=subprocess.DEVNULL, capture_output=True,
                timeout=self.timeout, text=True, errors="replace",
            )
        except subprocess.TimeoutExpired:
            raise DiscoveryError(f"{self.script!r} ran for more than {self.timeout:g} s") from None
        except OSError as e:
            raise DiscoveryError(f"cannot run {self.script!r}: {e.strerror or e}") from None
        if done.returncode != 0:
            tail = done.stderr.strip().splitlines()[-1:] or [""]
            raise DiscoveryError(f"{self.script!r} exited with code {done.returncode}: {tail[0]}")
        try:
            return parse_discovery(done.stdout, self.default_slots)
        except DiscoveryError as e:
            raise DiscoveryError(f"{self.script!r} printed a bad host list: {e}") from None


class FixedHosts:
    """The hosts of ``-H`` or ``--hostfile``: what an elastic job without a
    discovery script may use (fault tolerance without scaling).

    Args:
        hosts: The hosts.
    """

    def __init__(self, hosts: Sequence[HostSlots]) -> None:
        self.hosts = list(hosts)

    def discover(self) -> List[HostSlots]:
        """The same hosts, every time."""
        return list(self.hosts)


