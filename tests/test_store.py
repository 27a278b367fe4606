"""Tests of the rendezvous store: the API, and that strangers are dropped."""

from __future__ import annotations

import hashlib
import hmac
import os
import socket
import struct
import threading
import time

import pytest

from ring_strategy.runner import store as store_mod
from ring_strategy.runner.store import StoreAuthenticationError, StoreClient, StoreServer

SECRET = b"\x01" * 32


@pytest.fixture
def server():
    srv = StoreServer(SECRET)
    srv.start()
    yield srv
    srv.stop()


def _client(server: StoreServer, timeout: float = 10.0) -> StoreClient:
    return StoreClient(server.address, SECRET, timeout=timeout)


def _raw(server: StoreServer) -> socket.socket:
    host, port = server.address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=5)
    return sock


def _recv_all(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            break
        data += chunk
    return data


def _closed_by_peer(sock: socket.socket, timeout: float = 5.0) -> bool:
    """True when the peer closes the connection (EOF or reset) within timeout."""
    sock.settimeout(timeout)
    try:
        while True:
            if not sock.recv(4096):
                return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def _manual_handshake(sock: socket.socket, secret: bytes) -> bytes:
    """Runs the documented handshake by hand; returns the 64 bytes sent."""
    greeting = _recv_all(sock, 8 + 32)
    assert greeting[:8] == store_mod.MAGIC
    server_nonce = greeting[8:]
    client_nonce = os.urandom(32)
    mac = hmac.new(secret, b"ring-store client" + server_nonce + client_nonce, hashlib.sha256)
    answer = client_nonce + mac.digest()
    sock.sendall(answer)
    server_mac = _recv_all(sock, 32)
    expected = hmac.new(secret, b"ring-store server" + server_nonce + client_nonce, hashlib.sha256)
    assert hmac.compare_digest(server_mac, expected.digest())
    return answer


def _assert_still_serving(server: StoreServer) -> None:
    with _client(server) as c:
        c.set("alive", b"yes")
        assert c.get("alive") == b"yes"


# -- the API ----------------------------------------------------------------------


def test_set_get_roundtrip(server):
    with _client(server) as c:
        c.set("k", b"v")
        assert c.get("k") == b"v"
        c.set("k", b"w")
        assert c.get("k") == b"w"
        c.set("empty", b"")
        assert c.get("empty") == b""
        blob = bytes(range(256)) * 1000
        c.set("bin/ärger", blob)
        assert c.get("bin/ärger") == blob


def test_values_are_shared_between_clients(server):
    with _client(server) as a, _client(server) as b:
        a.set("addr/0", b"127.0.0.1:1234")
        assert b.get("addr/0") == b"127.0.0.1:1234"


def test_get_waits_until_key_is_set(server):
    with _client(server) as waiter, _client(server) as setter:
        result = {}

        def wait():
            result["value"] = waiter.get("late", timeout=10)

        t = threading.Thread(target=wait)
        t.start()
        time.sleep(0.3)
        assert t.is_alive(), "get returned before the key existed"
        setter.set("late", b"here")
        t.join(5)
        assert result["value"] == b"here"


def test_get_timeout_names_the_key(server):
    with _client(server) as c:
        start = time.monotonic()
        with pytest.raises(TimeoutError, match="never/set"):
            c.get("never/set", timeout=0.3)
        assert 0.25 < time.monotonic() - start < 5
        # The connection is still usable afterwards.
        c.set("x", b"1")
        assert c.get("x") == b"1"


def test_try_get_never_waits(server):
    with _client(server, timeout=30.0) as c:
        t0 = time.monotonic()
        assert c.try_get("absent") is None
        assert time.monotonic() - t0 < 5.0  # not the client's 30 s
        c.set("present", b"")
        assert c.try_get("present") == b""  # an empty value is a value


def test_default_get_timeout_is_the_client_timeout(server):
    with _client(server, timeout=0.2) as c:
        with pytest.raises(TimeoutError, match="'missing'"):
            c.get("missing")


def test_add_is_an_atomic_counter(server):
    with _client(server) as c:
        assert c.add("n", 1) == 1
        assert c.add("n", 5) == 6
        assert c.add("n", -2) == 4
        assert c.get("n") == b"4"
        c.set("text", b"abc")
        with pytest.raises(ValueError, match="text"):
            c.add("text", 1)
        assert c.add("n", 0) == 4  # still connected

    threads, per_thread = 8, 50

    def bump():
        with _client(server) as cc:
            for _ in range(per_thread):
                cc.add("shared", 1)

    workers = [threading.Thread(target=bump) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(30)
    with _client(server) as c:
        assert c.get("shared") == str(threads * per_thread).encode()


def test_one_client_shared_by_threads(server):
    with _client(server) as c:
        def work(i):
            for j in range(20):
                c.set(f"t{i}/{j}", str(j).encode())
                assert c.get(f"t{i}/{j}") == str(j).encode()

        ts = [threading.Thread(target=work, args=(i,)) for i in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(30)
        assert c.add("done", 4) == 4


def test_many_clients_blocked_at_once(server):
    n = 16
    results = [None] * n

    def wait(i):
        with _client(server) as c:
            c.add("arrived", 1)
            results[i] = c.get("go", timeout=10)

    ts = [threading.Thread(target=wait, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    with _client(server) as c:
        deadline = time.monotonic() + 10
        while c.add("arrived", 0) < n:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        c.set("go", b"!")
    for t in ts:
        t.join(10)
    assert results == [b"!"] * n


def test_client_retries_until_server_listens():
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    srv = StoreServer(SECRET, port=port)
    timer = threading.Timer(0.4, srv.start)
    timer.start()
    try:
        with StoreClient(f"127.0.0.1:{port}", SECRET, timeout=10) as c:
            c.set("a", b"b")
            assert c.get("a") == b"b"
    finally:
        timer.join()
        srv.stop()


def test_connect_timeout_when_nobody_listens():
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    with pytest.raises(TimeoutError, match=f"127.0.0.1:{port}"):
        StoreClient(f"127.0.0.1:{port}", SECRET, timeout=0.3)


def test_stop_releases_blocked_get(server):
    c = _client(server)
    errors = []

    def wait():
        try:
            c.get("never", timeout=30)
        except (TimeoutError, ConnectionError) as e:
            errors.append(e)

    t = threading.Thread(target=wait)
    t.start()
    time.sleep(0.2)
    server.stop()
    t.join(5)
    assert not t.is_alive() and errors
    c.close()


def test_bad_arguments(server):
    with pytest.raises(ValueError, match="host:port"):
        StoreClient("no-port", SECRET)
    with pytest.raises(ValueError):
        StoreServer(b"")
    with _client(server) as c:
        with pytest.raises(TypeError):
            c.set("k", "not bytes")  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            c.get(1)  # type: ignore[arg-type]


# -- strangers --------------------------------------------------------------------


def test_wrong_secret_is_rejected_and_server_keeps_serving(server):
    with pytest.raises(StoreAuthenticationError, match="rejected"):
        StoreClient(server.address, b"\x02" * 32, timeout=5)
    _assert_still_serving(server)


def test_garbage_is_dropped_and_server_keeps_serving(server):
    with _client(server) as legit:
        legit.set("before", b"1")
        sock = _raw(server)
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + os.urandom(200))
        assert _closed_by_peer(sock)
        sock.close()
        assert legit.get("before") == b"1"  # an existing connection is unaffected
    _assert_still_serving(server)


def test_silent_stranger_does_not_block_others(server):
    idle = _raw(server)  # connects, never answers the handshake
    try:
        start = time.monotonic()
        _assert_still_serving(server)
        assert time.monotonic() - start < 2
    finally:
        idle.close()


def test_replayed_handshake_is_dropped(server):
    first = _raw(server)
    recorded = _manual_handshake(first, SECRET)  # a legitimate handshake, overheard
    first.close()
    replay = _raw(server)
    assert _recv_all(replay, 40)[:8] == store_mod.MAGIC  # a fresh nonce comes first
    replay.sendall(recorded)
    assert _closed_by_peer(replay)
    replay.close()
    _assert_still_serving(server)


def test_oversized_frame_is_dropped_before_reading(server):
    sock = _raw(server)
    _manual_handshake(sock, SECRET)
    sock.sendall(struct.pack(">I", store_mod.MAX_FRAME_BYTES + 1))
    assert _closed_by_peer(sock)  # closed at once, without waiting for a payload
    sock.close()
    _assert_still_serving(server)


def test_malformed_request_is_dropped(server):
    sock = _raw(server)
    _manual_handshake(sock, SECRET)
    payload = b"Z" + struct.pack(">I", 1) + b"k"
    sock.sendall(struct.pack(">I", len(payload)) + payload)
    assert _closed_by_peer(sock)
    sock.close()
    _assert_still_serving(server)


def test_client_rejects_a_server_without_the_secret():
    """An impostor that accepts any client cannot fake the server's proof."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]

    def impostor():
        conn, _ = listener.accept()
        with conn:
            conn.sendall(store_mod.MAGIC + os.urandom(32))
            _recv_all(conn, 64)
            conn.sendall(os.urandom(32))
            time.sleep(0.5)

    t = threading.Thread(target=impostor)
    t.start()
    try:
        with pytest.raises(StoreAuthenticationError, match="prove"):
            StoreClient(f"127.0.0.1:{port}", SECRET, timeout=5)
    finally:
        t.join(5)
        listener.close()


def test_client_rejects_a_non_store_server():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]

    def http_server():
        conn, _ = listener.accept()
        with conn:
            conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n" + b" " * 40)
            time.sleep(0.5)

    t = threading.Thread(target=http_server)
    t.start()
    try:
        with pytest.raises(StoreAuthenticationError, match="not a ring rendezvous store"):
            StoreClient(f"127.0.0.1:{port}", SECRET, timeout=5)
    finally:
        t.join(5)
        listener.close()
