"""Fuzzing the rendezvous store's frame parser (ring_strategy/runner/store.py).

Requests reach the store as frames ``u32 length | payload``; the length is
checked against ``MAX_FRAME_BYTES`` before the payload is read, and a
malformed request ends that connection only. Here arbitrary bytes go to
the frame reader (over a real socket pair), to the request parser, and,
after a genuine handshake, to a running server, which must keep serving
its other clients with their data intact.

A few hundred examples each in ``make test``; 10,000 under the ``slow``
marker: ``.venv/bin/python -m pytest -m slow tests/reliability/test_fuzz_store.py``.
"""

from __future__ import annotations

import socket
import struct
import threading
from datetime import timedelta
from typing import Callable, Iterator, Optional

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from ring_strategy.runner import store as store_mod
from ring_strategy.runner.store import StoreClient, StoreServer

SHORT = settings(max_examples=150, deadline=timedelta(seconds=3), database=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
LONG = settings(max_examples=10_000, deadline=timedelta(seconds=3), database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
SECRET = b"fuzz-secret"
# What the server's connection loop catches: the connection is closed, the
# server goes on. Anything else escapes the serving thread.
HANDLED = (store_mod._ProtocolError, struct.error, UnicodeDecodeError, EOFError, OSError)
_LEN = struct.Struct(">I")


def _frame_bytes() -> st.SearchStrategy:
    """Arbitrary bytes, and frames whose length prefix is right, short or huge."""
    payload = st.binary(max_size=64)
    framed = payload.map(lambda p: _LEN.pack(len(p)) + p)
    lying = st.tuples(st.sampled_from([0, 1, 2 ** 16, store_mod.MAX_FRAME_BYTES + 1, 2 ** 32 - 1]), payload).map(
        lambda t: _LEN.pack(t[0]) + t[1])
    return st.one_of(st.binary(max_size=80), framed, lying)


def _requests() -> st.SearchStrategy:
    """Request payloads: op, key length, key, argument, valid or not."""
    op = st.sampled_from([b"S", b"G", b"A", b"X", b"", b"\0"])
    key = st.one_of(st.text(max_size=8).map(lambda s: s.encode()), st.binary(max_size=8))
    arg = st.one_of(st.binary(max_size=16), st.floats().map(lambda f: struct.pack(">d", f)),
                    st.integers(-(2 ** 63), 2 ** 63 - 1).map(lambda i: struct.pack(">q", i)))
    claimed = st.one_of(st.none(), st.integers(0, 2 ** 32 - 1))
    return st.one_of(st.binary(max_size=40), st.tuples(op, key, arg, claimed).map(
        lambda t: t[0] + _LEN.pack(len(t[1]) if t[3] is None else t[3]) + t[1] + t[2]))


def _get_wait(request: bytes) -> Optional[float]:
    """The wait of a well-formed get request (which blocks that long by design)."""
    if request[:1] != b"G" or len(request) < 5:
        return None
    (key_len,) = _LEN.unpack_from(request, 1)
    arg = request[5 + key_len:]
    return struct.unpack(">d", arg)[0] if len(arg) == 8 else None


def check_frame_reader(data: bytes) -> None:
    """The frame reader returns exactly the declared payload, or raises a
    handled error; an oversized length is refused before any read."""
    a, b = socket.socketpair()
    try:
        a.sendall(data)
        a.shutdown(socket.SHUT_WR)
        b.settimeout(2)
        try:
            payload = store_mod._recv_frame(b)
        except HANDLED:
            return
        (length,) = _LEN.unpack_from(data)
        assert length <= store_mod.MAX_FRAME_BYTES and payload == data[4:4 + length]
    finally:
        a.close()
        b.close()


def check_request_parser(request: bytes) -> None:
    """The request parser answers or raises a handled error (long get waits excluded)."""
    wait = _get_wait(request)
    assume(wait is None or not (wait > 0.01))  # a get that waits blocks by design
    server = StoreServer(SECRET)
    try:
        answer = server._handle(request)
    except HANDLED:
        return
    assert isinstance(answer, bytes) and answer[:1] in (b"\0", b"\1", b"\2"), answer


@SHORT
@given(data=_frame_bytes())
def test_frame_reader(data: bytes) -> None:
    check_frame_reader(data)


@SHORT
@given(request=_requests())
def test_request_parser(request: bytes) -> None:
    check_request_parser(request)


def test_oversized_frame_refused_before_reading() -> None:
    """A length above the limit is refused at once, with no payload sent."""
    a, b = socket.socketpair()
    with a, b:
        a.sendall(_LEN.pack(store_mod.MAX_FRAME_BYTES + 1))
        b.settimeout(2)
        with pytest.raises(store_mod._ProtocolError, match="exceeds the limit"):
            store_mod._recv_frame(b)


@pytest.mark.parametrize("wait", [1e300, float("inf")])
def test_get_with_huge_wait_is_a_clean_error(wait: float) -> None:
    request = b"G" + _LEN.pack(1) + b"k" + struct.pack(">d", wait)
    server = StoreServer(SECRET)
    try:
        server._handle(request)
    except HANDLED:
        pass


@pytest.fixture(scope="module")
def live_server() -> Iterator[StoreServer]:
    """A running store holding one value that must survive the fuzzing."""
    server = StoreServer(SECRET)
    server.start()
    with StoreClient(server.address, SECRET, timeout=5) as client:
        client.set("kept", b"value")
    yield server
    server.stop()


def _authenticated(server: StoreServer) -> socket.socket:
    """A raw connection that has passed the handshake."""
    host, port = server.address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=5)
    greeting = store_mod._recv_exact(sock, len(store_mod.MAGIC) + store_mod.NONCE_BYTES)
    server_nonce, client_nonce = greeting[len(store_mod.MAGIC):], b"\1" * store_mod.NONCE_BYTES
    sock.sendall(client_nonce + store_mod._mac(SECRET, store_mod._CLIENT_LABEL, server_nonce, client_nonce))
    store_mod._recv_exact(sock, store_mod.MAC_BYTES)
    return sock


def _exchange(sock: socket.socket, data: bytes) -> None:
    """Sends ``data`` and reads until the server closes; a reset or a close
    before everything was sent means the server dropped the connection."""
    try:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        sock.settimeout(5)
        while sock.recv(4096):
            pass  # answers, then the server's close
    except OSError as e:
        assert not isinstance(e, socket.timeout), "the server neither answered nor closed within 5 s"


def check_live(server: StoreServer, data: bytes) -> None:
    """Bytes after a genuine handshake: the server answers or drops this
    connection, and still serves another client with its data intact."""
    wait = _get_wait(data[4:]) if len(data) >= 4 else None
    assume(wait is None or not (wait > 0.01))
    before = threading.active_count()
    with _authenticated(server) as sock:
        _exchange(sock, data)
    with StoreClient(server.address, SECRET, timeout=5) as client:
        assert client.get("kept", timeout=1) == b"value"
    assert threading.active_count() <= before + 2


@pytest.mark.parametrize("source", ["frames", "requests"])
@settings(SHORT, max_examples=60)
@given(data=st.data())
def test_live_server_survives(live_server: StoreServer, source: str, data: st.DataObject) -> None:
    raw = data.draw(_frame_bytes()) if source == "frames" else _framed(data.draw(_requests()))
    check_live(live_server, raw)


def _framed(request: bytes) -> bytes:
    return _LEN.pack(len(request)) + request


@pytest.mark.slow
@pytest.mark.timeout(1800)  # 10,000 cases take minutes on a busy machine
@pytest.mark.parametrize("name, strategy, check", [
    ("frame reader", _frame_bytes(), check_frame_reader),
    ("request parser", _requests(), check_request_parser),
], ids=["frame-reader", "request-parser"])
def test_store_parsers_long(name: str, strategy: st.SearchStrategy, check: Callable[[bytes], None]) -> None:
    """10,000 examples of each store property."""
    LONG(given(strategy)(check))()


@pytest.mark.slow
@pytest.mark.timeout(1800)  # 10,000 cases take minutes on a busy machine
def test_live_server_long(live_server: StoreServer) -> None:
    """2,000 raw connections to a running server."""
    strategy = st.one_of(_frame_bytes(), _requests().map(_framed))
    settings(LONG, max_examples=2000)(given(strategy)(lambda d: check_live(live_server, d)))()
