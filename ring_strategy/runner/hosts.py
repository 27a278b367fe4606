"""Parsing of ``-H`` host lists (``host:slots,host:slots``)."""

from __future__ import annotations

import dataclasses
import socket
from typing import List

__all__ = ["HostSlots", "is_local_host", "parse_hosts"]

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
