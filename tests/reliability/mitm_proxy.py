"""A man in the middle on a job's encrypted TCP links (``RING_ENCRYPT=1``).

:class:`Proxy` listens on loopback, one port per mesh (data, control). A
rank that dials a peer through it (workers/tamper_job.py points its dialer
there) gets a connection the proxy relays to the peer's real listener, one
thread per direction. Each direction is parsed as the engine sends it: the
handshake's fixed-size messages in clear (reliability_net's docstring
gives them), then the AeadChannel's frames::

    plaintext length n (u32 LE) | n bytes of ciphertext | 16-byte tag

Everything is forwarded faithfully, frame by frame, unless a :class:`Fault`
names this mesh and direction: once ``after`` frames have gone through, the
next one has a bit of its ciphertext flipped (``flip``), or the frame before
it is sent again first (``replay``), or the link misbehaves from then on:

- ``delay``: every later frame waits ``delay_ms`` plus a uniform jitter of
  +-``jitter_ms`` before it goes (one direction's frames stay in order);
- ``cap``: every later frame is paced to ``mbit`` megabits per second;
- ``stall``: nothing more goes that way, and the connection stays open (a
  blackholed path: the kernels still answer, only the bytes stop);
- ``reset``: half of the next frame goes, then both connections of that
  link are reset (RST, no FIN).

The proxy counts the frames of every mesh and direction and records when
the fault went out (the first delayed or paced frame, the stall, the reset).
"""

from __future__ import annotations

import random
import socket
import struct
import threading
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple

from reliability_net import HELLO_BYTES, PROOF_BYTES, REPLY_BYTES

MESHES = ("data", "control")  # the order of the lines of a rank's endpoint
TO_ACCEPTOR, TO_DIALER = "to acceptor", "to dialer"
# The handshake's messages each direction carries before its first frame
# (each is answered before the next is sent: they are forwarded one by one).
_HANDSHAKE = {TO_ACCEPTOR: (HELLO_BYTES, PROOF_BYTES), TO_DIALER: (REPLY_BYTES, 1)}
_HEADER_BYTES, _TAG_BYTES = 4, 16
_MAX_FRAME_PLAINTEXT = 64 << 10  # AeadChannel::kFrameBytes

Upstream = Callable[[str], Tuple[str, int]]  # mesh -> the real listener's (host, port)


@dataclass(frozen=True)
class Fault:
    """What to do to one frame (``flip``, ``replay``), or to the link from
    that frame on (``delay``, ``cap``, ``stall``, ``reset``)."""

    kind: str
    mesh: str
    direction: str
    after: int  # frames of that mesh and direction forwarded faithfully first
    delay_ms: float = 0.0
    jitter_ms: float = 0.0
    mbit: float = 0.0


class Proxy:
    """Relays every connection made to :attr:`ports`; see the module's docstring."""

    def __init__(self, upstream: Upstream, fault: Optional[Fault] = None) -> None:
        self.fault = fault
        self.frames: Dict[Tuple[str, str], int] = {(m, d): 0 for m in MESHES for d in (TO_ACCEPTOR, TO_DIALER)}
        self.fault_at: Optional[float] = None  # unix time the altered frame went out
        self.errors: List[str] = []  # streams that did not parse as handshake and frames
        self._upstream = upstream
        self._lock = threading.Lock()
        self._sockets: List[socket.socket] = []
        self._stalled: List[socket.socket] = []  # kept open, never read again
        self._listeners = {m: socket.create_server(("127.0.0.1", 0)) for m in MESHES}
        self.ports = {m: s.getsockname()[1] for m, s in self._listeners.items()}
        for mesh, listener in self._listeners.items():
            threading.Thread(target=self._accept, args=(mesh, listener), daemon=True).start()

    def close(self) -> None:
        """Closes the listeners and every relayed connection."""
        with self._lock:
            for s in [*self._listeners.values(), *self._sockets]:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()

    def _accept(self, mesh: str, listener: socket.socket) -> None:
        while True:
            try:
                dialer, _ = listener.accept()
                acceptor = socket.create_connection(self._upstream(mesh), timeout=10)
            except OSError:
                return  # closed
            acceptor.settimeout(None)
            with self._lock:
                self._sockets += [dialer, acceptor]
            for src, dst, direction in ((dialer, acceptor, TO_ACCEPTOR), (acceptor, dialer, TO_DIALER)):
                threading.Thread(target=self._relay, args=(mesh, direction, src, dst), daemon=True).start()

    def _relay(self, mesh: str, direction: str, src: socket.socket, dst: socket.socket) -> None:
        """Forwards ``src`` to ``dst``: the handshake, then frame by frame."""
        stalled = False
        try:
            for size in _HANDSHAKE[direction]:
                dst.sendall(_read(src, size))
            previous = b""
            while True:
                header = _read(src, _HEADER_BYTES)
                n = struct.unpack("<I", header)[0]
                if n > _MAX_FRAME_PLAINTEXT:
                    self.errors.append(f"{mesh} {direction}: a frame of {n} bytes")
                    return
                frame = header + _read(src, n + _TAG_BYTES)
                kind = self._due(mesh, direction)
                if kind in ("stall", "reset"):
                    stalled = kind == "stall"
                    self._break(kind, frame, src, dst)
                    return
                if kind in ("delay", "cap"):
                    self._pace(frame)
                dst.sendall(self._tamper(kind, frame, previous))
                previous = frame
        except (OSError, EOFError):
            pass
        finally:
            for s in () if stalled else (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def _due(self, mesh: str, direction: str) -> Optional[str]:
        """Counts a frame; the fault's kind when it applies to this one."""
        with self._lock:
            self.frames[mesh, direction] += 1
            f = self.fault
            if f is None or (f.mesh, f.direction) != (mesh, direction):
                return None
            count = self.frames[mesh, direction]
            lasting = f.kind in ("delay", "cap")
            if count == f.after + 1 or (lasting and count > f.after):
                if self.fault_at is None:
                    self.fault_at = time.time()
                return f.kind
            return None

    def _pace(self, frame: bytes) -> None:
        """Holds a frame of a delayed or capped link."""
        f = self.fault
        if f.kind == "delay":
            time.sleep(max(0.0, f.delay_ms + random.uniform(-f.jitter_ms, f.jitter_ms)) / 1e3)
        else:
            time.sleep(len(frame) * 8 / (f.mbit * 1e6))

    def _break(self, kind: str, frame: bytes, src: socket.socket, dst: socket.socket) -> None:
        """A stall (this direction stops; both sockets stay open until the
        proxy closes) or a reset in the middle of ``frame``."""
        if kind == "stall":
            with self._lock:
                self._stalled.append(src)
            return
        dst.sendall(frame[:len(frame) // 2])
        for s in (src, dst):  # RST instead of FIN: linger on, for 0 s
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()

    @staticmethod
    def _tamper(kind: Optional[str], frame: bytes, previous: bytes) -> bytes:
        """The bytes to send for ``frame``: the frame itself, unless it is a flip's or a replay's."""
        if kind == "replay":
            return previous + frame
        if kind != "flip":
            return frame
        flipped = bytearray(frame)
        flipped[_HEADER_BYTES + (len(frame) - _HEADER_BYTES - _TAG_BYTES) // 2] ^= 0x10
        return bytes(flipped)


def _read(sock: socket.socket, n: int) -> bytes:
    """Exactly ``n`` bytes; EOFError when the connection ends first."""
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError
        buf += chunk
    return bytes(buf)
