"""Host lists (``-H host:slots,host:slots`` or a host file) and the placement of ranks on them."""

from __future__ import annotations

import dataclasses
import socket
from typing import List, Sequence

from ring_strategy.environments.network import is_local_address

__all__ = [
    "HostRanks", "HostSlots", "assign_ranks", "is_local_host", "is_this_host", "parse_hostfile",
    "parse_hosts",
]

_LOOPBACK_NAMES = {"localhost", "127.0.0.1", "::1", "localhost.localdomain"}


@dataclasses.dataclass(frozen=True)
class HostSlots:
    """One entry of a host list.

    Attributes:
        hostname: The host's name or address as written.
        slots: How many workers the host may run.
    """

    hostname: str
    slots: int


def parse_hosts(spec: str) -> List[HostSlots]:
    """Parses ``"host1:2,host2:4"``; a host without ``:slots`` has one slot.

    Args:
        spec: The comma-separated host list.

    Returns:
        The entries, in order.

    Raises:
        ValueError: If an entry is malformed; the message quotes it.
    """
    hosts: List[HostSlots] = []
    for raw in spec.split(","):
        entry = raw.strip()
        if not entry:
            raise ValueError(f"host list has an empty entry. Got: {spec!r}")
        if entry.startswith("["):  # [ipv6] or [ipv6]:slots
            name, _, rest = entry[1:].partition("]")
            slots_text = rest[1:] if rest.startswith(":") else (rest or "1")
        elif entry.count(":") > 1:  # a bare IPv6 address
            name, slots_text = entry, "1"
        else:
            name, sep, slots_text = entry.partition(":")
            if not sep:
                slots_text = "1"
        if not name:
            raise ValueError(f"host entry should look like 'host:slots'. Got: {entry!r}")
        if name.startswith("-"):  # ssh would read it as an option
            raise ValueError(f"host name should not start with '-'. Got: {name!r}")
        try:
            slots = int(slots_text)
        except ValueError:
            raise ValueError(
                f"slots of host {name!r} should be a positive integer. Got: {slots_text!r}"
            ) from None
        if slots < 1:
            raise ValueError(
                f"slots of host {name!r} should be a positive integer. Got: {slots_text!r}"
            )
        hosts.append(HostSlots(name, slots))
    return hosts


def is_local_host(hostname: str) -> bool:
    """Tells whether ``hostname`` names this machine.

    Args:
        hostname: A name or address from a host list.

    Returns:
        True for loopback names and addresses and for this machine's own names.
    """
    name = hostname.lower()
    if name in _LOOPBACK_NAMES or name.startswith("127."):
        return True
    own = {socket.gethostname().lower()}
    try:
        own.add(socket.getfqdn().lower())
    except OSError:
        pass
    return name in own


def parse_hostfile(path: str) -> List[HostSlots]:
    """Reads a host file: one host a line, as ``host slots=N``, ``host:N`` or ``host``.

    Blank lines and everything after a ``#`` are ignored, as in the host files
    of Horovod and Open MPI.

    Args:
        path: The file to read.

    Returns:
        The entries, in order.

    Raises:
        OSError: If the file cannot be read.
        ValueError: If a line is malformed; the message names the file and line.
    """
    hosts: List[HostSlots] = []
    with open(path, encoding="utf-8") as f:
        for number, raw in enumerate(f, start=1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            name, *options = line.split()
            try:
                if options:
                    if len(options) > 1 or not options[0].startswith("slots="):
                        raise ValueError(f"expected 'host slots=N'. Got: {line!r}")
                    entry = f"{name}:{options[0][len('slots='):]}"
                else:
                    entry = name
                hosts.extend(parse_hosts(entry))
            except ValueError as e:
                raise ValueError(f"{path}, line {number}: {e}") from None
    if not hosts:
        raise ValueError(f"host file {path!r} lists no host")
    return hosts


@dataclasses.dataclass(frozen=True)
class HostRanks:
    """The ranks one host runs in a job.

    Attributes:
        hostname: The host's name or address as given by ``-H`` or the host file.
        first_rank: The global rank of its first worker.
        count: How many workers it runs (its local size).
        cross_rank: The host's index among the job's hosts.
    """

    hostname: str
    first_rank: int
    count: int
    cross_rank: int

    @property
    def ranks(self) -> range:
        """The global ranks of the host's workers, in local-rank order."""
        return range(self.first_rank, self.first_rank + self.count)


def assign_ranks(hosts: Sequence[HostSlots], np: int) -> List[HostRanks]:
    """Places ``np`` workers on the hosts in order, filling each host's slots first.

    As in Horovod, ranks 0 to ``slots - 1`` go to the first host, the next ones
    to the second, and so on; hosts left without a worker are not part of the
    job.

    Args:
        hosts: The hosts, each at most once.
        np: The number of workers, at most the total number of slots.

    Returns:
        One entry per host that runs at least one worker.

    Raises:
        ValueError: If a host is listed twice or the slots do not suffice.
    """
    seen = set()
    for host in hosts:
        key = host.hostname.lower()
        if key in seen:
            raise ValueError(f"host {host.hostname!r} is listed more than once")
        seen.add(key)
    total = sum(h.slots for h in hosts)
    if np > total:
        raise ValueError(f"-np {np} is more than the {total} slots of the hosts")
    placed: List[HostRanks] = []
    rank = 0
    for host in hosts:
        if rank == np:
            break
        count = min(host.slots, np - rank)
        placed.append(HostRanks(host.hostname, rank, count, len(placed)))
        rank += count
    return placed


def is_this_host(hostname: str) -> bool:
    """Tells whether workers for ``hostname`` are started here rather than over ssh.

    True for loopback names, this machine's own names and any address (or
    name resolving to one) that a socket here can bind to.

    Args:
        hostname: A name or address from a host list.

    Returns:
        True if the host is this machine.
    """
    return is_local_host(hostname) or is_local_address(hostname)
