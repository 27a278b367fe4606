"""Host addresses for jobs that span several hosts.

A job on one host uses loopback only; these helpers choose the address a
process of a multi-host job advertises to its peers and check that a
rendezvous address names this host.
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Optional

__all__ = ["is_local_address", "is_loopback", "join_address", "route_address", "split_address"]

# Any routable address will do: connecting a UDP socket sends nothing, it only
# asks the kernel which local address the route to it would use.
_PROBE_ADDRESS = ("192.0.2.1", 9)  # TEST-NET-1 (RFC 5737)


def split_address(address: str) -> tuple[str, int]:
    """Splits ``"host:port"`` (or ``"[v6]:port"``) into host and port.

    Args:
        address: The address.

    Returns:
        The host (without brackets) and the port.

    Raises:
        ValueError: If the address does not look like ``host:port``; the
            message quotes it.
    """
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"address should look like 'host:port'. Got: {address!r}")
    return host.strip("[]"), int(port)


def join_address(host: str, port: int) -> str:
    """``"host:port"``, with brackets around an IPv6 host (the inverse of :func:`split_address`)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def is_loopback(host: str) -> bool:
    """Tells whether ``host`` is ``localhost`` or a loopback IP address (no lookup)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _local_address_towards(host: str, port: int) -> Optional[str]:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)
    except OSError:
        return None
    for family, _, _, _, sockaddr in infos:
        try:
            with socket.socket(family, socket.SOCK_DGRAM) as probe:
                probe.connect(sockaddr)
                return str(probe.getsockname()[0])
        except OSError:
            continue
    return None


def route_address(rendezvous_address: Optional[str]) -> str:
    """Returns this host's address as the other hosts of a job should see it.

    It is the local address of the route to the rendezvous host; when that is
    a loopback address (the rendezvous host is this one and its name maps to
    loopback), the address of the default route is used instead.

    Args:
        rendezvous_address: ``"host:port"`` of the rendezvous store, or None.

    Returns:
        An IP address of this host.
    """
    if rendezvous_address:
        host, port = split_address(rendezvous_address)
        found = _local_address_towards(host, port)
        if found is not None and not is_loopback(found):
            return found
    found = _local_address_towards(*_PROBE_ADDRESS)
    if found is not None:
        return found
    return socket.gethostbyname(socket.gethostname())


def is_local_address(host: str) -> bool:
    """Tells whether ``host`` resolves to an address of this machine.

    Args:
        host: A host name or IP address.

    Returns:
        True if a socket can be bound to one of its addresses.
    """
    try:
        infos = socket.getaddrinfo(host, 0, type=socket.SOCK_DGRAM)
    except OSError:
        return False
    for family, _, _, _, sockaddr in infos:
        try:
            with socket.socket(family, socket.SOCK_DGRAM) as probe:
                probe.bind((sockaddr[0], 0))
                return True
        except OSError:
            continue
    return False
