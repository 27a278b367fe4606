"""A small authenticated TCP key-value store for rendezvous.

``ringrun`` serves one per job (rank 0 serves it when there is no launcher);
every worker publishes what its peers need (listening addresses, for one) and
waits for what it needs from them.

Wire protocol (all integers big-endian):

1. Handshake, fixed sizes, before anything else is read. ``secret`` is the
   job's secret, ``S`` and ``C`` fresh 32-byte random nonces::

       server -> client   MAGIC (8) | S (32)
       client -> server   C (32) | HMAC-SHA256(secret, b"ring-store client" | S | C)
       server -> client   HMAC-SHA256(secret, b"ring-store server" | S | C)

   Each side checks the other's MAC with a constant-time compare and closes the
   connection on mismatch. Both nonces are fresh per connection, so a recorded
   handshake replayed on a new connection fails; the direction labels stop a
   MAC from being reflected back.
2. Requests and responses are frames: ``u32 length | payload``. The length is
   checked against :data:`MAX_FRAME_BYTES` before the payload is read.
   Request payload: ``op (1) | u32 key length | key (UTF-8) | argument``:

   - ``b"S"`` set: argument is the value. Response ``b"\\x00"``.
   - ``b"G"`` get: argument is ``f64`` seconds to wait. Response
     ``b"\\x00" | value``, or ``b"\\x01"`` when the wait timed out.
   - ``b"A"`` add: argument is ``i64`` delta. Response ``b"\\x00" | i64`` new
     value, or ``b"\\x02" | message`` when the key holds something else.
     Counters are stored as ASCII decimal, so ``get`` reads them too.

   Any malformed request closes that connection; other clients are unaffected.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import socket
import struct
import threading
import time
from typing import Dict, Optional, Set

from ring_strategy.environments.network import join_address

__all__ = [
    "MAX_FRAME_BYTES",
    "StoreAuthenticationError",
    "StoreClient",
    "StoreServer",
]

#: Identifies the protocol (and its version) in the server's greeting.
MAGIC = b"RINGKV01"
NONCE_BYTES = 32
MAC_BYTES = 32
#: Largest frame either side accepts; anything longer closes the connection.
MAX_FRAME_BYTES = 64 * 1024 * 1024
#: How long a new connection may take to complete the handshake.
HANDSHAKE_TIMEOUT_SECONDS = 10.0

_CLIENT_LABEL = b"ring-store client"
_SERVER_LABEL = b"ring-store server"
_OP_SET = b"S"
_OP_GET = b"G"
_OP_ADD = b"A"
_OK = b"\x00"
_TIMED_OUT = b"\x01"
_FAILED = b"\x02"
_LEN = struct.Struct(">I")
_F64 = struct.Struct(">d")
_MAX_WAIT_SECONDS = 86400.0
_I64 = struct.Struct(">q")


class StoreAuthenticationError(ConnectionError):
    """The peer could not prove that it knows the job's secret."""


class _ProtocolError(Exception):
    """A peer broke the protocol; its connection is closed."""


def _mac(secret: bytes, label: bytes, server_nonce: bytes, client_nonce: bytes) -> bytes:
    return hmac.new(secret, label + server_nonce + client_nonce, hashlib.sha256).digest()


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    """Reads exactly ``n`` bytes; raises EOFError if the peer closes first."""
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise EOFError(f"connection closed after {got} of {n} bytes")
        got += k
    return bytes(buf)


def _send_frame(sock: socket.socket, payload: bytes) -> None:
    sock.sendall(_LEN.pack(len(payload)) + payload)


def _recv_frame(sock: socket.socket) -> bytes:
    (length,) = _LEN.unpack(_recv_exact(sock, _LEN.size))
    if length > MAX_FRAME_BYTES:
        raise _ProtocolError(f"frame of {length} bytes exceeds the limit of {MAX_FRAME_BYTES}")
    return _recv_exact(sock, length)


def _check_secret(secret: bytes) -> bytes:
    if not isinstance(secret, (bytes, bytearray)) or len(secret) == 0:
        raise ValueError(f"secret should be non-empty bytes. Got: {type(secret).__name__}")
    return bytes(secret)


def _split_address(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"store address should look like 'host:port'. Got: {address!r}")
    return host.strip("[]"), int(port)


class StoreServer:
    """Serves the key-value store to any number of authenticated clients.

    One thread accepts connections and one thread serves each connection, so a
    client blocked in :meth:`StoreClient.get` never delays the others, and a
    client that fails the handshake or breaks the protocol is simply dropped.

    Args:
        secret: The job's secret; clients must prove they know it.
        host: Interface to listen on. Loopback by default: a single-host job
            needs nothing else.
        port: Port to listen on; 0 (default) picks a free one.

    Example:
        >>> server = StoreServer(b"s3cret")
        >>> server.start()
        >>> client = StoreClient(server.address, b"s3cret")
        >>> client.set("a", b"1"); client.get("a")
        b'1'
        >>> client.close(); server.stop()
    """

    def __init__(self, secret: bytes, host: str = "127.0.0.1", port: int = 0) -> None:
        self._secret = _check_secret(secret)
        self._host = host
        self._port = port
        self._data: Dict[str, bytes] = {}
        self._cond = threading.Condition()
        self._listener: Optional[socket.socket] = None
        self._accept_thread: Optional[threading.Thread] = None
        self._conns: Set[socket.socket] = set()
        self._conns_lock = threading.Lock()
        self._stopping = False

    @property
    def address(self) -> str:
        """The address clients connect to, as ``"host:port"``.

        Raises:
            RuntimeError: If the server has not been started.
        """
        if self._listener is None:
            raise RuntimeError("StoreServer.address is known only after start()")
        host, port = self._listener.getsockname()[:2]
        return join_address(host, port)

    def start(self) -> None:
        """Binds the socket and starts serving in background threads."""
        if self._listener is not None:
            raise RuntimeError("StoreServer is already started")
        family = socket.AF_INET6 if ":" in self._host else socket.AF_INET
        listener = socket.socket(family, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((self._host, self._port))
        listener.listen(128)
        self._listener = listener
        self._accept_thread = threading.Thread(
            target=self._accept_loop, name="ring-store-accept", daemon=True
        )
        self._accept_thread.start()

    def stop(self) -> None:
        """Stops serving and closes every connection. Safe to call twice."""
        self._stopping = True
        listener, self._listener = self._listener, None
        if listener is not None:
            try:
                listener.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            listener.close()
        with self._conns_lock:
            conns = list(self._conns)
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        with self._cond:
            self._cond.notify_all()
        if self._accept_thread is not None and self._accept_thread is not threading.current_thread():
            self._accept_thread.join(timeout=5)

    def __enter__(self) -> StoreServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- serving ---------------------------------------------------------------

    def _accept_loop(self) -> None:
        listener = self._listener
        assert listener is not None
        while not self._stopping:
            try:
                conn, _ = listener.accept()
            except OSError:
                if self._stopping:
                    return
                time.sleep(0.01)  # e.g. EMFILE: back off rather than spin
                continue
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._conns_lock:
                self._conns.add(conn)
            threading.Thread(
                target=self._serve, args=(conn,), name="ring-store-conn", daemon=True
            ).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            if self._handshake(conn):
                while not self._stopping:
                    try:
                        request = _recv_frame(conn)
                    except EOFError:
                        return  # a clean close by the client
                    _send_frame(conn, self._handle(request))
        except (OSError, EOFError, _ProtocolError, struct.error, UnicodeDecodeError):
            pass  # drop this connection only
        finally:
            with self._conns_lock:
                self._conns.discard(conn)
            conn.close()

    def _handshake(self, conn: socket.socket) -> bool:
        conn.settimeout(HANDSHAKE_TIMEOUT_SECONDS)
        server_nonce = secrets.token_bytes(NONCE_BYTES)
        conn.sendall(MAGIC + server_nonce)
        answer = _recv_exact(conn, NONCE_BYTES + MAC_BYTES)
        client_nonce, client_mac = answer[:NONCE_BYTES], answer[NONCE_BYTES:]
        expected = _mac(self._secret, _CLIENT_LABEL, server_nonce, client_nonce)
        if not hmac.compare_digest(client_mac, expected):
            return False
        conn.sendall(_mac(self._secret, _SERVER_LABEL, server_nonce, client_nonce))
        conn.settimeout(None)
        return True

    def _handle(self, request: bytes) -> bytes:
        if len(request) < 5:
            raise _ProtocolError("request too short")
        op = request[:1]
        (key_len,) = _LEN.unpack_from(request, 1)
        if 5 + key_len > len(request):
            raise _ProtocolError("key length exceeds the request")
        key = request[5 : 5 + key_len].decode("utf-8")
        arg = request[5 + key_len :]
        if op == _OP_SET:
            with self._cond:
                self._data[key] = arg
                self._cond.notify_all()
            return _OK
        if op == _OP_GET:
            (wait,) = _F64.unpack(arg)
            # NaN, inf or 1e300 would overflow the condition's timeout; a job
            # waits minutes at a rendezvous, never more than a day.
            if not wait <= _MAX_WAIT_SECONDS:  # also NaN
                raise _ProtocolError(f"get: a wait of {wait!r} s is more than {_MAX_WAIT_SECONDS:g} s")
            deadline = time.monotonic() + max(0.0, wait)
            with self._cond:
                while key not in self._data:
                    left = deadline - time.monotonic()
                    if left <= 0 or self._stopping:
                        return _TIMED_OUT
                    self._cond.wait(left)
                return _OK + self._data[key]
        if op == _OP_ADD:
            (delta,) = _I64.unpack(arg)
            with self._cond:
                old = self._data.get(key, b"0")
                try:
                    value = int(old.decode("ascii")) + delta
                except (UnicodeDecodeError, ValueError):
                    return _FAILED + f"key {key!r} does not hold a counter: {old[:40]!r}".encode()
                self._data[key] = str(value).encode("ascii")
                self._cond.notify_all()
            return _OK + _I64.pack(value)
        raise _ProtocolError(f"unknown op {op!r}")


class StoreClient:
    """A connection to a :class:`StoreServer`.

    Connecting retries until ``timeout`` while the server is not yet listening,
    then runs the mutual handshake. One client may be shared by threads; their
    requests are serialized.

    Args:
        address: The server's ``"host:port"``.
        secret: The job's secret.
        timeout: Seconds to keep trying to connect, and the default wait of
            :meth:`get`.

    Raises:
        StoreAuthenticationError: If either side fails to prove it knows the
            secret.
        TimeoutError: If the server cannot be reached within ``timeout``.
    """

    def __init__(self, address: str, secret: bytes, timeout: float = 60.0) -> None:
        self._address = address
        self._secret = _check_secret(secret)
        self.timeout = float(timeout)
        self._lock = threading.Lock()
        self._sock: Optional[socket.socket] = self._connect(*_split_address(address))

    @property
    def address(self) -> str:
        """The server's address, as given."""
        return self._address

    def _connect(self, host: str, port: int) -> socket.socket:
        deadline = time.monotonic() + self.timeout
        delay = 0.01
        while True:
            try:
                sock = socket.create_connection((host, port), timeout=max(1.0, self.timeout))
                break
            except (ConnectionRefusedError, ConnectionResetError, socket.timeout) as e:
                if time.monotonic() + delay > deadline:
                    raise TimeoutError(
                        f"could not connect to the rendezvous store at {self._address} "
                        f"within {self.timeout:g} s: {e}"
                    ) from None
                time.sleep(delay)
                delay = min(delay * 2, 0.5)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.settimeout(min(self.timeout, HANDSHAKE_TIMEOUT_SECONDS) or None)
            greeting = _recv_exact(sock, len(MAGIC) + NONCE_BYTES)
            if greeting[: len(MAGIC)] != MAGIC:
                raise StoreAuthenticationError(
                    f"{self._address} is not a ring rendezvous store (bad greeting)"
                )
            server_nonce = greeting[len(MAGIC) :]
            client_nonce = secrets.token_bytes(NONCE_BYTES)
            sock.sendall(client_nonce + _mac(self._secret, _CLIENT_LABEL, server_nonce, client_nonce))
            try:
                server_mac = _recv_exact(sock, MAC_BYTES)
            except (EOFError, ConnectionResetError):
                raise StoreAuthenticationError(
                    f"the rendezvous store at {self._address} rejected the handshake "
                    "(wrong job secret?)"
                ) from None
            expected = _mac(self._secret, _SERVER_LABEL, server_nonce, client_nonce)
            if not hmac.compare_digest(server_mac, expected):
                raise StoreAuthenticationError(
                    f"the rendezvous store at {self._address} could not prove it knows "
                    "the job secret"
                )
            sock.settimeout(None)
            return sock
        except BaseException as e:
            sock.close()
            if isinstance(e, (EOFError, socket.timeout)):
                raise StoreAuthenticationError(
                    f"handshake with the rendezvous store at {self._address} failed: {e}"
                ) from None
            raise

    def _request(self, op: bytes, key: str, arg: bytes, io_timeout: Optional[float]) -> bytes:
        if not isinstance(key, str):
            raise TypeError(f"store keys should be str. Got: {type(key).__name__}")
        k = key.encode("utf-8")
        payload = op + _LEN.pack(len(k)) + k + arg
        if len(payload) > MAX_FRAME_BYTES:
            raise ValueError(
                f"store request for key {key!r} is {len(payload)} bytes; "
                f"the limit is {MAX_FRAME_BYTES}"
            )
        with self._lock:
            sock = self._sock
            if sock is None:
                raise ConnectionError("StoreClient is closed")
            try:
                sock.settimeout(io_timeout)
                _send_frame(sock, payload)
                response = _recv_frame(sock)
            except (OSError, EOFError, _ProtocolError) as e:
                self._drop()
                if isinstance(e, socket.timeout):
                    raise TimeoutError(
                        f"rendezvous store at {self._address} did not answer for key {key!r}"
                    ) from None
                raise ConnectionError(
                    f"lost the connection to the rendezvous store at {self._address}: {e}"
                ) from None
        if not response:
            raise ConnectionError(f"empty response from the rendezvous store at {self._address}")
        return response

    def _drop(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()

    def set(self, key: str, value: bytes) -> None:
        """Stores ``value`` under ``key``, replacing any previous value.

        Args:
            key: The key.
            value: The value.
        """
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise TypeError(f"store values should be bytes. Got: {type(value).__name__}")
        self._request(_OP_SET, key, bytes(value), self.timeout)

    def get(self, key: str, timeout: Optional[float] = None) -> bytes:
        """Returns the value of ``key``, waiting until some client sets it.

        Args:
            key: The key.
            timeout: Seconds to wait; defaults to the client's ``timeout``.

        Returns:
            The value.

        Raises:
            TimeoutError: If the key did not appear in time; the message names it.
        """
        wait = self.timeout if timeout is None else float(timeout)
        response = self._request(_OP_GET, key, _F64.pack(wait), wait + 30.0)
        if response[:1] == _TIMED_OUT:
            raise TimeoutError(
                f"timed out after {wait:g} s waiting for key {key!r} in the rendezvous "
                f"store at {self._address}"
            )
        return response[1:]

    def try_get(self, key: str) -> Optional[bytes]:
        """Returns the value of ``key`` now, or None when no client has set it (no waiting).

        Args:
            key: The key.
        """
        response = self._request(_OP_GET, key, _F64.pack(0.0), self.timeout)
        return None if response[:1] == _TIMED_OUT else response[1:]

    def add(self, key: str, delta: int) -> int:
        """Atomically adds ``delta`` to the counter ``key`` (missing counts as 0).

        Args:
            key: The key.
            delta: The amount to add; may be negative.

        Returns:
            The counter's new value.

        Raises:
            ValueError: If ``key`` holds a value that is not a counter.
        """
        response = self._request(_OP_ADD, key, _I64.pack(int(delta)), self.timeout)
        if response[:1] == _FAILED:
            raise ValueError(response[1:].decode("utf-8", "replace"))
        if len(response) != 1 + _I64.size:
            raise ConnectionError(f"malformed add response from {self._address}")
        return _I64.unpack_from(response, 1)[0]

    def close(self) -> None:
        """Closes the connection. Safe to call twice."""
        with self._lock:
            self._drop()

    def __enter__(self) -> StoreClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
