"""Strangers against every port a running job listens on.

A three-rank job (workers/security_job.py) holds still while its ranks
connect: the last rank has published its endpoints but waits before
connecting, so the other ranks sit in their connection phase. The test
finds the job's listening sockets from /proc (ringrun's rendezvous store,
each rank's data and control listeners) and, over TCP, sends each listener
garbage, a valid-looking control frame, silence, a Hello with a wrong
proof, a replayed proof and a reflected MAC. It reads the job's secret from
a worker's environment (as any process of the same user could) to build
the replay and to check that the engine proves its own knowledge of the
secret. Then the last rank connects, and while the job allreduces the
store gets garbage, a frame without handshake and a replayed handshake.

Every stranger must be dropped, the listeners must be on loopback and gone
once the ranks are connected, the secret must be on no command line, and
the job must finish with correct results.

With shared memory (the default transport) the engine's TCP listeners
close as soon as a rank starts connecting; the last rank's, still open and
not yet accepting, get the strangers, which must be closed when it connects.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Set

import pytest
from reliability_jobs import WORKERS, JobResult, finish, start_job_tagged
from reliability_net import (Listener, all_command_lines, closed_by_peer, dial, environment, job_listeners,
                             job_processes, mac, recv_exact, start_handshake)

from ring_strategy.runner import store as store_mod
from ring_strategy.runner.store import StoreAuthenticationError, StoreClient

WORKER = WORKERS / "security_job.py"
NP = 3
LAST = NP - 1
TRANSPORTS = ["shm", "tcp"]
DROP_SECONDS = 8.0  # the engine drops a silent stranger after 5 s
LOOPBACK = {"127.0.0.1", "::1"}


@dataclass
class Findings:
    """What the attack on one job observed."""

    listeners: Set[Listener] = field(default_factory=set)  # every one seen
    targets: List[Listener] = field(default_factory=list)  # the ranks' listeners open at the attack
    outcomes: Dict[str, str] = field(default_factory=dict)  # attack -> "dropped" or what happened
    acceptor_proofs: List[bool] = field(default_factory=list)
    fresh_nonces: List[bool] = field(default_factory=list)
    listening_once_connected: List[Listener] = field(default_factory=list)
    advertised: List[str] = field(default_factory=list)  # addr= of every endpoint
    secret_on_command_line: bool = False
    job: Optional[JobResult] = None


def _frame() -> bytes:
    """A well-formed control message (a RequestList with one request), framed."""
    name = b"stranger"
    request = (struct.pack("<I", len(name)) + name + bytes([0, 7, 0]) + struct.pack("<Idd", 0, 1.0, 1.0)
               + struct.pack("<Iq", 1, 4) + struct.pack("<I", 0))
    payload = b"\0" + struct.pack("<I", 0) + struct.pack("<I", 1) + request
    return struct.pack("<Q", len(payload)) + payload


def _record(findings: Findings, name: str, attack: Callable[[], bytes], forbidden: bytes = b"") -> None:
    """Runs one attack; it must end with the job closing the connection."""
    try:
        got = attack()
        ok = not forbidden or forbidden not in got
        findings.outcomes[name] = "dropped" if ok else f"dropped after sending {got!r}"
    except (OSError, EOFError, TimeoutError) as e:
        refused = isinstance(e, ConnectionRefusedError)
        findings.outcomes[name] = "refused" if refused else f"{type(e).__name__}: {e}"


def _send_and_wait(target: Listener, data: bytes) -> bytes:
    with dial(target) as s:
        s.sendall(data)
        return closed_by_peer(s, DROP_SECONDS)


def _handshake_attacks(findings: Findings, target: Listener, secret: bytes) -> None:
    """Hello with a wrong proof, a replayed proof and a reflected MAC."""
    tag = f"rank {target.rank} port {target.port}"
    nonce = os.urandom(32)

    def wrong_proof() -> bytes:
        sock, nonce_a, acceptor_mac = start_handshake(target, LAST, nonce)
        with sock:
            findings.acceptor_proofs.append(acceptor_mac == mac(secret, b"acceptor", LAST, target.rank, nonce, nonce_a))
            sock.sendall(os.urandom(32))
            return closed_by_peer(sock, DROP_SECONDS)

    def replay() -> bytes:
        first, nonce_1, _ = start_handshake(target, LAST, nonce)
        with first:  # a genuine proof for the first connection, sent on a second one
            proof = mac(secret, b"connector", LAST, target.rank, nonce, nonce_1)
            second, nonce_2, _ = start_handshake(target, LAST, nonce)
            with second:
                findings.fresh_nonces.append(nonce_1 != nonce_2)
                second.sendall(proof)
                return closed_by_peer(second, DROP_SECONDS)

    def reflect() -> bytes:
        sock, _, acceptor_mac = start_handshake(target, LAST, nonce)
        with sock:
            sock.sendall(acceptor_mac)
            return closed_by_peer(sock, DROP_SECONDS)

    for name, attack in [("wrong proof", wrong_proof), ("replayed proof", replay), ("reflected mac", reflect)]:
        _record(findings, f"{tag}: {name}", attack, forbidden=b"K")


def _wait_for(condition: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up after {seconds:g} s waiting for {what}")
        time.sleep(0.05)


def _endpoint_ports(gate: Path) -> Dict[str, Dict[int, int]]:
    """{"data": {rank: port}, "control": {rank: port}} from the endpoints the
    last rank wrote (each rank's is its data and its control endpoint, one a line)."""
    endpoints = json.loads((gate / "endpoints.json").read_text())
    ports: Dict[str, Dict[int, int]] = {"data": {}, "control": {}}
    for rank, text in enumerate(endpoints):
        for kind, line in zip(("data", "control"), text.split("\n")):
            ports[kind][rank] = int(re.search(r";port=(\d+)", line)[1])
    return ports


def _advertised(gate: Path) -> List[str]:
    """The addresses every endpoint tells peers to connect to."""
    return re.findall(r";addr=([^;]*)", (gate / "endpoints.json").read_text())


def _setup_phase(findings: Findings, tag: str, transport: str, gate: Path) -> List:
    """Waits for the connection phase and attacks it: over TCP the other
    ranks' data listeners accept (handshake attacks); strangers parked on
    listeners that do not accept yet are returned, to be checked once the
    last rank connects."""
    _wait_for(lambda: (gate / "endpoints.json").exists(), 60, "the last rank's endpoints")
    ports = _endpoint_ports(gate)
    findings.advertised = _advertised(gate)
    early_data = {ports["data"][r] for r in range(LAST)}

    def ready() -> bool:  # over shm the early ranks close their data listeners on connecting
        findings.listeners |= set(job_listeners(tag))
        return transport == "tcp" or not early_data & {l.port for l in job_listeners(tag)}

    _wait_for(ready, 60, "the ranks to reach their connection phase")
    time.sleep(0.5)
    findings.listeners |= set(job_listeners(tag))
    pid = next(p for p, r in job_processes(tag).items() if r == 0)
    secret = bytes.fromhex(environment(pid)["RING_SECRET"])
    findings.secret_on_command_line = any(secret.hex().encode() in c or secret in c for c in all_command_lines())
    live = [l for l in job_listeners(tag) if l.rank is not None]
    findings.targets = live
    accepting = [l for l in live if l.port in early_data] if transport == "tcp" else []
    parked = []
    for target in [l for l in live if l not in accepting]:
        for name, data in [("garbage", os.urandom(256)), ("control frame", _frame()), ("silence", b"")]:
            s = dial(target)
            s.sendall(data)
            parked.append((f"rank {target.rank} port {target.port} (not accepting yet): {name}", s))
    silent = [(t, dial(t)) for t in accepting]
    for target in accepting:
        tag_ = f"rank {target.rank} port {target.port}"
        _record(findings, f"{tag_}: garbage", lambda t=target: _send_and_wait(t, os.urandom(256)))
        _record(findings, f"{tag_}: control frame", lambda t=target: _send_and_wait(t, _frame()))
        _handshake_attacks(findings, target, secret)
    for target, s in silent:
        with s:
            _record(findings, f"rank {target.rank} port {target.port}: silence", lambda s=s: closed_by_peer(s, 8))
    return parked


def _store_attacks(findings: Findings, store: Listener, secret: bytes) -> None:
    """Strangers against the rendezvous store while the job runs."""
    greeting = len(store_mod.MAGIC) + store_mod.NONCE_BYTES

    def replay() -> bytes:
        with dial(store) as first, dial(store) as second:
            server_nonce = recv_exact(first, greeting)[len(store_mod.MAGIC):]
            client_nonce = os.urandom(32)
            answer = client_nonce + store_mod._mac(secret, store_mod._CLIENT_LABEL, server_nonce, client_nonce)
            recv_exact(second, greeting)
            second.sendall(answer)
            return closed_by_peer(second, DROP_SECONDS)

    def wrong_secret() -> bytes:
        try:
            StoreClient(f"{store.host}:{store.port}", b"not the secret", timeout=5).close()
        except StoreAuthenticationError:
            return b""
        return b"accepted"

    frame = struct.pack(">I", 6) + b"G" + struct.pack(">I", 1) + b"k"
    _record(findings, "store: garbage", lambda: _send_and_wait(store, os.urandom(256)), forbidden=b"\0\0\0")
    _record(findings, "store: frame without handshake", lambda: _send_and_wait(store, frame * 20))
    _record(findings, "store: replayed handshake", replay)
    _record(findings, "store: wrong secret", wrong_secret, forbidden=b"accepted")


def _attack(transport: str) -> Findings:
    """Runs the job on ``transport`` and every attack on it."""
    findings = Findings()
    gate = Path(tempfile.mkdtemp(prefix="ring-security-"))
    proc, tag = start_job_tagged(NP, [WORKER, gate], env={"RING_TRANSPORT": transport})
    try:
        parked = _setup_phase(findings, tag, transport, gate)
        (gate / "connect").touch()
        for name, s in parked:
            with s:
                _record(findings, name, lambda s=s: closed_by_peer(s, 15))
        _wait_for(lambda: all(l.rank is None for l in job_listeners(tag)), 30, "the ranks to connect")
        time.sleep(0.5)
        findings.listening_once_connected = [l for l in job_listeners(tag) if l.rank is not None]
        pid = next(p for p, r in job_processes(tag).items() if r == 0)
        store = next(l for l in findings.listeners if l.rank is None)
        _store_attacks(findings, store, bytes.fromhex(environment(pid)["RING_SECRET"]))
    finally:
        (gate / "connect").touch()
        (gate / "finish").touch()
        findings.job = finish(proc, tag, timeout=120)
        shutil.rmtree(gate, ignore_errors=True)
    return findings


_findings: Dict[str, Findings] = {}


@pytest.fixture(params=TRANSPORTS)
def attacked(request: pytest.FixtureRequest) -> Findings:
    """The findings of the job on one transport (attacked once per module)."""
    if request.param not in _findings:
        _findings[request.param] = _attack(request.param)
    return _findings[request.param]


def test_job_finishes_with_correct_results(attacked: Findings) -> None:
    job = attacked.job
    assert job.returncode == 0, job.tail()
    assert sum(f"{r}: ok " in job.output for r in range(NP)) == NP, job.tail()
    assert job.leftover_processes == [] and job.leftover_segments == []


def test_every_listener_is_attacked_and_drops_strangers(attacked: Findings) -> None:
    assert attacked.targets, "no listener of a rank was open during the connection phase"
    for target in attacked.targets:
        assert any(f"port {target.port}" in name for name in attacked.outcomes), target
    assert any(name.startswith("store:") for name in attacked.outcomes)
    bad = {name: what for name, what in attacked.outcomes.items() if what != "dropped"}
    assert not bad, bad


def test_listeners_on_loopback_only(attacked: Findings) -> None:
    assert attacked.listeners, "no listening socket found"
    assert {l.host for l in attacked.listeners} <= LOOPBACK, sorted(attacked.listeners, key=str)
    assert len(attacked.advertised) == 2 * NP and set(attacked.advertised) <= LOOPBACK, attacked.advertised


def test_engine_listeners_close_once_connected(attacked: Findings) -> None:
    assert attacked.listening_once_connected == []


def test_secret_on_no_command_line(attacked: Findings) -> None:
    assert not attacked.secret_on_command_line


@pytest.mark.parametrize("attacked", ["tcp"], indirect=True)
def test_acceptor_proves_the_secret_with_fresh_nonces(attacked: Findings) -> None:
    assert attacked.acceptor_proofs and all(attacked.acceptor_proofs), attacked.acceptor_proofs
    assert attacked.fresh_nonces and all(attacked.fresh_nonces), attacked.fresh_nonces
