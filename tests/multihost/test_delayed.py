"""The delayed links of delayed.py: every pair of namespace hosts over its own
relay, so that traffic between the hosts' main addresses takes the delay.

Round trips are timed as TCP handshakes to the hosts' sshd (one SYN, one
SYN-ACK), as ``ping`` is not among the test machines' packages.

Marked ``netns``; skipped unless root with iproute2, OpenSSH and /dev/net/tun.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from .delayed import DelayedLinks
from .netns import Cluster

pytestmark = pytest.mark.netns

_RTT = textwrap.dedent("""
    import socket, sys, time
    times = []
    for _ in range(5):
        start = time.perf_counter()
        socket.create_connection((sys.argv[1], 22), timeout=5).close()
        times.append(time.perf_counter() - start)
    print(min(times) * 1000)
""")


def _rtt_ms(cluster: Cluster, src: int, dst: int) -> float:
    """The shortest of five TCP handshakes from host ``src`` to host ``dst``'s sshd, in ms."""
    result = cluster.run_in(src, [sys.executable, "-c", _RTT, cluster.addresses[dst]], timeout=30)
    assert result.returncode == 0, result.stderr
    return float(result.stdout)


def _routes(cluster: Cluster, host: int) -> str:
    return subprocess.run(["ip", "-n", cluster.namespaces[host], "route"], capture_output=True, text=True,
                          check=True, timeout=30).stdout


def test_delayed_links_delay_every_pair_and_go_away(cluster: Cluster) -> None:
    """With 2 ms one way, a round trip from host 0 to hosts 1 and 2 takes at least
    4 ms, 10 MB cross a link over ssh, and afterwards the routes are gone and
    round trips are back well under 1 ms."""
    if not Path("/dev/net/tun").exists():
        pytest.skip("no /dev/net/tun for the relay links")
    with DelayedLinks(cluster, delay_ms=2.0) as links:
        assert links.pairs == [(0, 1), (0, 2), (1, 2)]
        delayed = [_rtt_ms(cluster, 0, 1), _rtt_ms(cluster, 0, 2)]
        sent = subprocess.run([*cluster.exec_prefix(0), "ssh", *cluster.ssh_args(), cluster.addresses[2],
                               "wc -c"], input=b"x" * 10_000_000, capture_output=True, timeout=60)
        assert sent.returncode == 0, sent.stderr
        assert sent.stdout.split() == [b"10000000"]
    assert all(ms >= 4.0 for ms in delayed), delayed
    assert links.counters[(0, 2)]["received"] > 10_000_000 // 1500, links.counters
    assert all(c["dropped"] == 0 for c in links.counters.values()), links.counters
    for host in range(cluster.count):
        assert " dev rd" not in _routes(cluster, host)
    after = [_rtt_ms(cluster, 0, 1), _rtt_ms(cluster, 0, 2)]
    assert all(ms < 1.0 for ms in after), after
