"""Delayed links between every pair of namespace hosts: a stand-in for
``tc netem delay`` on a kernel without netem.

Contract: :class:`DelayedLinks` takes a started :class:`~.netns.Cluster` and a
one-way delay. Entering it gives every pair of hosts ``i < j`` a point-to-point
link of its own, the userspace relay of :mod:`.relay` (one relay process per
pair: 3 for 3 hosts, 6 for 4), with TUN devices named ``rd<i><j>`` in both
namespaces and the addresses ``10.98.<pair>.1`` (host ``i``) and
``10.98.<pair>.2`` (host ``j``), ``<pair>`` numbering the pairs from 0 in the
order (0, 1), (0, 2), ..., (1, 2), .... It then adds host routes: in host
``i``, ``10.99.0.(10 + j)/32 dev rd<i><j> src 10.99.0.(10 + i)``, and the same
the other way round. So traffic between the hosts' MAIN addresses (those of the
bridge, which sshd and ringrun use) crosses the pair's relay in both directions
with the hosts' main addresses as source and destination: programs see nothing
but the delay, and since each host's route back goes over the same link, the
reverse-path filter passes every packet. Each packet is delivered ``delay_ms``
after the relay reads it (one way; a round trip, e.g. a ping, takes about
``2 * delay_ms``), without loss, jitter or reordering. Leaving it deletes the
routes first (traffic goes back to the bridge; connections made under the
delay carry on there) and then stops the relays, whose TUN devices vanish with
them.

The links' MTU is the relay's and ``eth0``'s, 1500 by default, so TCP's MSS is
the same on both paths; the relay reads packets of up to 64 KiB, so a larger
``mtu`` (fewer, larger packets: less Python work per byte) works too.

Cost: each relay is a Python process that copies every packet (a ``select``
loop, one ``read`` and one ``write`` a packet), so the links take CPU that the
ranks would otherwise have, their bandwidth is that of a Python loop (tens of
MB/s to a few hundred, not the bridge's GB/s), and their delay grows under load
when the machine has fewer free cores than busy relays. Use them to measure
latency-bound behaviour, not bandwidth.

Needs root and ``/dev/net/tun``, as :mod:`.relay` does.

Example::

    with DelayedLinks(cluster, delay_ms=2.0):
        cluster.run_in(0, ["ssh", *cluster.ssh_args(), cluster.addresses[1], "true"])  # ~4 ms a round trip
"""

from __future__ import annotations

import contextlib
import itertools
import subprocess
from typing import List, Optional, Tuple

from .netns import Cluster
from .relay import ImpairedLink

__all__ = ["DelayedLinks"]

_SUBNET = "10.98"
_MAX_PAIRS = 256  # one /24 of 10.98 per pair


def _ip(namespace: str, *args: str, check: bool = True) -> None:
    result = subprocess.run(["ip", "-n", namespace, *args], capture_output=True, text=True, timeout=30)
    if check and result.returncode != 0:
        raise RuntimeError(f"ip -n {namespace} {' '.join(args)} failed ({result.returncode}): "
                           f"{result.stderr.strip()}")


class DelayedLinks:
    """Every pair of ``cluster``'s hosts joined by its own link of ``delay_ms`` one way.

    Args:
        cluster: A started cluster.
        delay_ms: The one-way delay of every link, in milliseconds (>= 0).
        mtu: The links' MTU (default 1500, as ``eth0``'s).

    Attributes:
        pairs: The pairs ``(i, j)``, ``i < j``, in the order of their address blocks.
        counters: After leaving, each pair's relay counters (see :mod:`.relay`).
    """

    def __init__(self, cluster: Cluster, delay_ms: float, mtu: int = 1500) -> None:
        if delay_ms < 0:
            raise ValueError(f"delay_ms should not be negative. Got: {delay_ms!r}")
        self.cluster = cluster
        self.delay_ms = delay_ms
        self.mtu = mtu
        self.pairs: List[Tuple[int, int]] = list(itertools.combinations(range(cluster.count), 2))
        if len(self.pairs) > _MAX_PAIRS:
            raise ValueError(f"at most {_MAX_PAIRS} pairs of hosts (23 hosts). Got: {cluster.count} hosts")
        self.counters: dict = {}
        self._links: List[ImpairedLink] = []
        self._routes: List[Tuple[str, str]] = []  # (namespace, destination)
        self._stack: Optional[contextlib.ExitStack] = None

    @staticmethod
    def device(i: int, j: int) -> str:
        """The TUN device of the link between hosts ``i < j`` (in both of their namespaces)."""
        return f"rd{i}{j}"

    def __enter__(self) -> "DelayedLinks":
        stack = contextlib.ExitStack()
        try:
            for number, (i, j) in enumerate(self.pairs):
                link = ImpairedLink(self.cluster.namespaces[i], self.cluster.namespaces[j],
                                    ["--delay-ms", str(self.delay_ms), "--mtu", str(self.mtu),
                                     "--address-a", f"{_SUBNET}.{number}.1",
                                     "--address-b", f"{_SUBNET}.{number}.2"],
                                    name=self.device(i, j))
                stack.enter_context(link)
                self._links.append(link)
            stack.callback(self._remove_routes)  # runs before the relays stop
            for i, j in self.pairs:
                self._route(i, j)
                self._route(j, i)
        except BaseException:
            stack.close()
            self._links.clear()
            raise
        self._stack = stack
        return self

    def _route(self, src: int, dst: int) -> None:
        """Sends host ``src``'s traffic for host ``dst``'s main address over their link."""
        namespace = self.cluster.namespaces[src]
        destination = f"{self.cluster.addresses[dst]}/32"
        _ip(namespace, "route", "replace", destination, "dev", self.device(min(src, dst), max(src, dst)),
            "src", self.cluster.addresses[src])
        self._routes.append((namespace, destination))

    def _remove_routes(self) -> None:
        for namespace, destination in reversed(self._routes):
            _ip(namespace, "route", "del", destination, check=False)
        self._routes.clear()

    def __exit__(self, *exc) -> None:
        stack, self._stack = self._stack, None
        if stack is None:
            return
        stack.__exit__(*exc)
        self.counters = {pair: link.counters for pair, link in zip(self.pairs, self._links)}
        self._links.clear()
