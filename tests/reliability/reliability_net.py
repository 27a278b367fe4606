"""Looking at a running job from outside: its processes' listening sockets
(from /proc), its secret (from a worker's environment, as the same user
could), and stranger connections that speak the engine's handshake.

The engine's handshake (native/transport/handshake.h)::

    connector -> acceptor  Hello (48 B): "RING1", version 1, 2 reserved,
                           connector rank, acceptor rank (u32 LE), nonce[32]
    acceptor -> connector  Reply (64 B): nonce[32], HMAC(secret, "acceptor" | transcript)
    connector -> acceptor  Proof (32 B): HMAC(secret, "connector" | transcript)
    acceptor -> connector  Ack   (1 B): 'K'

    transcript = "RING1" | version | connector rank | acceptor rank | nonce_c | nonce_a
"""

from __future__ import annotations

import hashlib
import hmac
import os
import socket
import struct
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

HELLO_BYTES, REPLY_BYTES, PROOF_BYTES = 48, 64, 32
_LISTEN = "0A"


@dataclass(frozen=True)
class Listener:
    """A listening TCP socket of one process of the job."""

    pid: int
    rank: Optional[int]  # None: ringrun (the rendezvous store)
    host: str
    port: int


def _socket_inodes(pid: int) -> set:
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    return inodes


def _decode_address(hex_addr: str) -> Tuple[str, int]:
    host_hex, port_hex = hex_addr.split(":")
    raw = bytes.fromhex(host_hex)
    if len(raw) == 4:
        host = socket.inet_ntop(socket.AF_INET, raw[::-1])
    else:  # /proc prints IPv6 as four little-endian 32-bit words
        host = socket.inet_ntop(socket.AF_INET6, b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4)))
    return host, int(port_hex, 16)


def listening(pid: int) -> List[Tuple[str, int]]:
    """(host, port) of every TCP socket process ``pid`` listens on."""
    try:
        inodes = _socket_inodes(pid)
    except OSError:
        return []
    found = []
    for table in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == _LISTEN and fields[9] in inodes:
                found.append(_decode_address(fields[1]))
    return found


def environment(pid: int) -> Dict[str, str]:
    """Process ``pid``'s environment."""
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)


def job_processes(tag: str) -> Dict[int, Optional[int]]:
    """pid -> rank (None for ringrun) of the live processes tagged ``tag``."""
    procs = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            if tag.encode() not in (proc / "cmdline").read_bytes():
                continue
            rank = environment(int(proc.name)).get("RING_RANK")
        except OSError:
            continue
        procs[int(proc.name)] = None if rank is None else int(rank)
    return procs


def job_listeners(tag: str) -> List[Listener]:
    """Every listening socket of the job's processes."""
    return [Listener(pid, rank, host, port) for pid, rank in job_processes(tag).items()
            for host, port in listening(pid)]


def all_command_lines() -> List[bytes]:
    """The command line of every process on the machine."""
    lines = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                lines.append((proc / "cmdline").read_bytes())
            except OSError:
                pass
    return lines


def dial(listener: Listener, timeout: float = 5.0) -> socket.socket:
    """A plain TCP connection to ``listener``."""
    return socket.create_connection((listener.host, listener.port), timeout=timeout)


def closed_by_peer(sock: socket.socket, timeout: float) -> bytes:
    """Waits until the peer closes ``sock``; returns what it sent meanwhile.
    Raises TimeoutError when it is still open after ``timeout`` seconds."""
    got = b""
    deadline = time.monotonic() + timeout
    while True:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            chunk = sock.recv(4096)
        except ConnectionResetError:
            return got
        except socket.timeout:
            raise TimeoutError(f"still open after {timeout:g} s (received {got!r})") from None
        if not chunk:
            return got
        got += chunk


def hello(connector: int, acceptor: int, nonce: bytes) -> bytes:
    """The engine's Hello frame."""
    return b"RING1" + bytes([1, 0, 0]) + struct.pack("<II", connector, acceptor) + nonce


def _transcript(connector: int, acceptor: int, nonce_c: bytes, nonce_a: bytes) -> bytes:
    return b"RING1" + bytes([1]) + struct.pack("<II", connector, acceptor) + nonce_c + nonce_a


def mac(secret: bytes, label: bytes, connector: int, acceptor: int, nonce_c: bytes, nonce_a: bytes) -> bytes:
    """HMAC-SHA256 of the handshake: ``label`` is b"acceptor" or b"connector"."""
    return hmac.new(secret, label + _transcript(connector, acceptor, nonce_c, nonce_a), hashlib.sha256).digest()


def recv_exact(sock: socket.socket, n: int, timeout: float = 10.0) -> bytes:
    """Exactly ``n`` bytes; raises EOFError when the peer closes first."""
    sock.settimeout(timeout)
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError(f"closed after {len(buf)} of {n} bytes")
        buf += chunk
    return buf


def start_handshake(listener: Listener, connector: int, nonce: bytes) -> Tuple[socket.socket, bytes, bytes]:
    """Sends a Hello to ``listener`` as rank ``connector``; returns the open
    connection and the acceptor's nonce and MAC from its Reply."""
    sock = dial(listener)
    sock.sendall(hello(connector, listener.rank, nonce))
    reply = recv_exact(sock, REPLY_BYTES)
    return sock, reply[:32], reply[32:]
