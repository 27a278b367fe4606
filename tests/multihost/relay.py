"""An impaired point-to-point link between two namespace hosts, made in userspace:
a stand-in for ``tc netem`` on kernels without it.

Contract: ``python -m tests.multihost.relay NS_A NS_B [options]`` (root) enters
network namespace ``NS_A`` (``/var/run/netns/NS_A``), opens a TUN device
``--name`` (default ``ringtun``) there, does the same in ``NS_B``, gives the
two ends the addresses ``--address-a``/``--address-b`` (default 10.98.0.1 and
10.98.0.2) as peers of each other and the MTU ``--mtu``, brings them up, and
prints the line ``ready`` on stdout. From then on it copies every IP packet
that one end's kernel sends to the other end, in both directions: a packet is
dropped with probability ``--loss``, otherwise delivered after ``--delay-ms``
plus a uniform jitter of +-``--jitter-ms``; with probability ``--reorder`` a
delivered packet is instead held back and delivered right after the next
packet of its direction (or ``--delay-ms`` later, when none comes). Faults
start mid-run on signals: SIGUSR1 sets the loss to ``--fault-loss`` (default
0.1), SIGUSR2 to 1 (the link is down). On SIGTERM
or SIGINT it prints one JSON line of counters (``received``, ``dropped``,
``delivered``, ``held`` (packets held back for reordering), ``reordered``
(packets delivered after a packet that arrived later)) and exits 0; the TUN
devices vanish with it. Bad arguments or a namespace that cannot be entered end
it with a message on stderr and exit status 2 before ``ready``.

:class:`ImpairedLink` starts and stops the relay from a test.
"""

from __future__ import annotations

import argparse
import ctypes
import fcntl
import heapq
import json
import os
import random
import select
import signal
import struct
import subprocess
import sys
import time
from typing import Dict, List, Optional, Tuple

__all__ = ["ImpairedLink"]

_TUNSETIFF = 0x400454CA
_IFF_TUN = 0x0001
_IFF_NO_PI = 0x1000
_CLONE_NEWNET = 0x40000000
_NETNS_DIR = "/var/run/netns"


def _enter_namespace(name: str) -> None:
    """Moves this (single-threaded) process into network namespace ``name``."""
    fd = os.open(os.path.join(_NETNS_DIR, name), os.O_RDONLY)
    try:
        if hasattr(os, "setns"):
            os.setns(fd, _CLONE_NEWNET)
        else:
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.setns(fd, _CLONE_NEWNET) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"setns into {name}: {os.strerror(err)}")
    finally:
        os.close(fd)


def _open_tun(name: str) -> int:
    """A non-blocking TUN device ``name`` (raw IP packets) in the current namespace."""
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(fd, _TUNSETIFF, struct.pack("16sH", name.encode(), _IFF_TUN | _IFF_NO_PI))
    return fd


def _configure(namespace: str, device: str, local: str, peer: str, mtu: int) -> None:
    for cmd in (["addr", "add", local, "peer", f"{peer}/32", "dev", device],
                ["link", "set", device, "mtu", str(mtu), "up"]):
        subprocess.run(["ip", "-n", namespace, *cmd], check=True, capture_output=True, timeout=30)


class _Relay:
    """Copies packets between two TUN descriptors through a loss/delay/reorder model."""

    def __init__(self, fds: Tuple[int, int], args: argparse.Namespace) -> None:
        self.fds = fds
        self.args = args
        self.rng = random.Random(args.seed)
        self.heap: List[Tuple[float, int, int, bytes]] = []  # (due, arrival number, to index, packet)
        self.held: Dict[int, Optional[Tuple[float, int, bytes]]] = {0: None, 1: None}
        self.last_sent = {0: -1, 1: -1}
        self.arrivals = 0
        self.counters = dict(received=0, dropped=0, delivered=0, held=0, reordered=0)
        self.loss = args.loss  # changed by the fault signals

    def _arrive(self, to: int, packet: bytes, now: float) -> None:
        self.counters["received"] += 1
        self.arrivals += 1
        if self.rng.random() < self.loss:
            self.counters["dropped"] += 1
            return
        delay = self.args.delay_ms + self.rng.uniform(-self.args.jitter_ms, self.args.jitter_ms)
        heapq.heappush(self.heap, (now + max(delay, 0.0) / 1000, self.arrivals, to, packet))

    def _send(self, to: int, number: int, packet: bytes) -> None:
        try:
            os.write(self.fds[to], packet)
        except BlockingIOError:
            self.counters["dropped"] += 1  # the receiving kernel's queue is full: a real link drops too
            return
        self.counters["delivered"] += 1
        if number < self.last_sent[to]:
            self.counters["reordered"] += 1
        self.last_sent[to] = max(self.last_sent[to], number)

    def _release(self, to: int, number: int, packet: bytes, now: float) -> None:
        """Delivers a due packet, or holds it back to follow the next one."""
        held = self.held[to]
        if held is None and self.rng.random() < self.args.reorder:
            self.held[to] = (now + self.args.delay_ms / 1000, number, packet)
            self.counters["held"] += 1
            return
        self._send(to, number, packet)
        if held is not None:
            self.held[to] = None
            self._send(to, held[1], held[2])

    def _flush_held(self, now: float) -> None:
        for to, held in self.held.items():
            if held is not None and held[0] <= now:
                self.held[to] = None
                self._send(to, held[1], held[2])

    def _timeout(self, now: float) -> float:
        dues = [self.heap[0][0]] if self.heap else []
        dues += [h[0] for h in self.held.values() if h is not None]
        return max(min(dues) - now, 0.0) if dues else 1.0

    def step(self) -> None:
        """Waits for packets or the next due time, then moves what is ready."""
        readable, _, _ = select.select(list(self.fds), [], [], self._timeout(time.monotonic()))
        now = time.monotonic()
        for i, fd in enumerate(self.fds):
            if fd in readable:
                for _ in range(64):
                    try:
                        packet = os.read(fd, 65536)
                    except BlockingIOError:
                        break
                    self._arrive(1 - i, packet, now)
        while self.heap and self.heap[0][0] <= now:
            _, number, to, packet = heapq.heappop(self.heap)
            self._release(to, number, packet, now)
        self._flush_held(now)


def _parse(argv: List[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="relay", description=__doc__.split("\n\n")[0])
    p.add_argument("namespace_a")
    p.add_argument("namespace_b")
    p.add_argument("--name", default="ringtun")
    p.add_argument("--address-a", default="10.98.0.1")
    p.add_argument("--address-b", default="10.98.0.2")
    p.add_argument("--mtu", type=int, default=1500)
    p.add_argument("--loss", type=float, default=0.0)
    p.add_argument("--fault-loss", type=float, default=0.1)
    p.add_argument("--delay-ms", type=float, default=0.0)
    p.add_argument("--jitter-ms", type=float, default=0.0)
    p.add_argument("--reorder", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    for field in ("loss", "fault_loss", "reorder"):
        if not 0.0 <= getattr(args, field) <= 1.0:
            p.error(f"--{field.replace('_', '-')} should be a probability in [0, 1]. Got: {getattr(args, field)}")
    if args.jitter_ms < 0 or args.delay_ms < 0:
        p.error("--delay-ms and --jitter-ms should not be negative")
    return args


def main(argv: List[str]) -> int:
    args = _parse(argv)
    try:
        fds = []
        for ns in (args.namespace_a, args.namespace_b):
            _enter_namespace(ns)
            fds.append(_open_tun(args.name))
        _configure(args.namespace_a, args.name, args.address_a, args.address_b, args.mtu)
        _configure(args.namespace_b, args.name, args.address_b, args.address_a, args.mtu)
    except (OSError, subprocess.SubprocessError) as e:
        print(f"relay: cannot make the link: {e}", file=sys.stderr)
        return 2
    stop = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.append(True))
    relay = _Relay((fds[0], fds[1]), args)
    signal.signal(signal.SIGUSR1, lambda *_: setattr(relay, "loss", args.fault_loss))
    signal.signal(signal.SIGUSR2, lambda *_: setattr(relay, "loss", 1.0))
    print("ready", flush=True)
    while not stop:
        try:
            relay.step()
        except InterruptedError:
            continue
    print(json.dumps(relay.counters), flush=True)
    return 0


class ImpairedLink:
    """The relay between namespaces ``a`` and ``b`` as a context manager.

    ``flags`` are relay options (e.g. ``["--loss", "0.01"]``). Entering starts
    it and waits for ``ready``; leaving stops it and fills :attr:`counters`
    (a relay that ended badly raises RuntimeError, unless the body raised).
    """

    def __init__(self, a: str, b: str, flags: List[str], name: str = "ringtun") -> None:
        self.name = name
        self.argv = [sys.executable, "-m", "tests.multihost.relay", a, b, "--name", name, *flags]
        self.counters: Dict[str, int] = {}
        self._proc: Optional[subprocess.Popen] = None

    def __enter__(self) -> "ImpairedLink":
        repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        self._proc = subprocess.Popen(self.argv, cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      stdin=subprocess.DEVNULL, text=True)
        line = self._proc.stdout.readline()
        if line.strip() != "ready":
            self._proc.kill()
            _, err = self._proc.communicate()
            raise RuntimeError(f"the relay did not start: {line}{err}")
        return self

    def fault(self, down: bool) -> None:
        """Starts the fault: ``--fault-loss`` from now on, or (``down``) every packet lost."""
        assert self._proc is not None
        self._proc.send_signal(signal.SIGUSR2 if down else signal.SIGUSR1)

    def __exit__(self, *exc) -> None:
        self._proc.send_signal(signal.SIGTERM)
        try:
            out, err = self._proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            out, err = self._proc.communicate()
        lines = out.strip().splitlines()
        if self._proc.returncode != 0 or not lines:
            if exc[0] is not None:
                return  # the body's own error says more
            raise RuntimeError(f"the relay ended with status {self._proc.returncode}: {err[-2000:]}")
        self.counters = json.loads(lines[-1])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
