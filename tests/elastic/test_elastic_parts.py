"""The parts of elastic launching, one process, no job: ringrun's elastic
options and their errors, discovery output, worlds and their layouts, the
blacklist, workers' variables, shared-memory names of worlds, and the
worker's side of the store protocol against a real store."""

from __future__ import annotations

import os
import secrets
import time
from typing import Iterator, List

import pytest

from ring_strategy import _contracts as names
from ring_strategy.environments import DETECTION_ORDER, ElasticEnvironment, detect_environment
from ring_strategy.environments import elastic
from ring_strategy.runner.blacklist import Blacklist
from ring_strategy.runner.discovery import DiscoveryError, HostDiscovery, parse_discovery
from ring_strategy.runner.hosts import HostSlots
from ring_strategy.runner.launch import main
from ring_strategy.runner.membership import World, form_world
from ring_strategy.runner.store import StoreClient, StoreServer
from ring_strategy.runner.worker_env import elastic_worker_environment, worker_environment

CMD = ["python", "-c", "pass"]


@pytest.mark.parametrize("argv, message", [
    (["-np", "2", "--reset-limit", "1"], "--reset-limit is for elastic jobs"),
    (["-np", "2", "--elastic-timeout", "5"], "--elastic-timeout is for elastic jobs"),
    (["-np", "2", "-H", "localhost:2", "--host-discovery-script", "true"], "either -H/--hostfile or --host-discovery-script"),
    (["-np", "2", "--min-np", "3"], "--min-np 3 should be at most -np 2"),
    (["-np", "2", "--min-np", "1", "--max-np", "1"], "--max-np 1 should be at least -np 2"),
    (["--host-discovery-script", "true"], "-np N"),
    (["-np", "1", "--min-np", "0"], "--min-np should be a positive integer"),
    (["-np", "1", "--min-np", "1", "-H", "localhost", "--slots-per-host", "2"], "--slots-per-host is for --host-discovery-script"),
    (["-np", "1", "--host-discovery-script", "true", "--slots-per-host", "0"], "--slots-per-host should be a positive"),
    (["-np", "1", "--min-np", "1", "--blacklist-cooldown-range", "5", "1"], "0 <= MIN <= MAX. Got: 5 1"),
    (["-np", "1", "--min-np", "1", "--elastic-timeout", "0"], "--elastic-timeout should be a positive"),
    (["-np", "1", "--min-np", "1", "--discovery-interval", "-1"], "--discovery-interval should be a positive"),
    (["-np", "1", "--min-np", "1", "--reset-limit", "-1"], "--reset-limit should be 0 or more"),
    (["-np", "3", "--min-np", "1", "-H", "127.0.0.1:1,127.0.0.2:1"], "-np 3 is more than the 2 slots"),
    (["-np", "1", "--min-np", "1", "--network-interface", "nosuch0"], "--network-interface: network interface 'nosuch0'"),
])
def test_bad_elastic_options(argv: List[str], message: str, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as e:
        main(argv + CMD)
    assert e.value.code == 2
    assert message in capsys.readouterr().err


def test_bad_elastic_timeout_variable(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setenv(names.ELASTIC_TIMEOUT, "soon")
    with pytest.raises(SystemExit):
        main(["-np", "1", "--min-np", "1"] + CMD)
    assert "RING_ELASTIC_TIMEOUT should be a positive number of seconds. Got: 'soon'" in capsys.readouterr().err


def test_discovery_output() -> None:
    text = "127.0.0.1:2\n\n# spare\n127.0.0.2   # one slot by default\n[::1]:3\n"
    assert parse_discovery(text, 4) == [HostSlots("127.0.0.1", 2), HostSlots("127.0.0.2", 4), HostSlots("::1", 3)]
    for bad, words in [("a:0", "slots of host 'a'"), ("a,b", "one host a line"), ("a\nA:2", "listed more than once")]:
        with pytest.raises(DiscoveryError, match=words):
            parse_discovery(bad, 1)


def test_discovery_script_failures() -> None:
    assert HostDiscovery("printf 'h1:2\\nh2\\n'", 3).discover() == [HostSlots("h1", 2), HostSlots("h2", 3)]
    with pytest.raises(DiscoveryError, match="exited with code 3: no hosts"):
        HostDiscovery("echo no hosts >&2; exit 3").discover()
    with pytest.raises(DiscoveryError, match="ran for more than 0.2 s"):
        HostDiscovery("sleep 5", timeout=0.2).discover()
    with pytest.raises(DiscoveryError, match="printed a bad host list"):
        HostDiscovery("echo 'h:x'").discover()


def test_worlds_rank_by_age() -> None:
    first = form_world(1, [(2, "b"), (0, "a"), (1, "b")], None)
    assert first.workers == (0, 1, 2) and not first.skip_sync
    layout = first.layout(2)
    assert layout is not None
    assert (layout.rank, layout.local_rank, layout.local_size, layout.cross_rank, layout.cross_size) == (2, 1, 2, 1, 2)
    assert first.layout(7) is None
    smaller = form_world(2, [(2, "b"), (1, "b")], first, removed=[0])
    assert smaller.workers == (1, 2) and smaller.skip_sync and smaller.removed == (0,)
    assert smaller.layout(1).rank == 0  # the oldest survivor
    grown = form_world(3, [(1, "b"), (2, "b"), (3, "c")], smaller)
    assert not grown.skip_sync
    assert World.decode(grown.encode()) == grown
    with pytest.raises(ValueError, match="not an elastic world record"):
        World.decode(b"{}")


def test_blacklist_for_good_and_for_a_while() -> None:
    now = [100.0]
    forever = Blacklist(clock=lambda: now[0])
    assert forever.add("H") == float("inf") and forever.blocked("h")
    cooling = Blacklist((1.0, 2.0), clock=lambda: now[0])
    assert 1.0 <= cooling.add("h") <= 2.0 and cooling.blocked("h") and cooling.hosts() == ["h"]
    assert cooling.expiring() == []
    now[0] += 2.0
    assert not cooling.blocked("h") and cooling.expiring() == ["h"] and cooling.expiring() == []
    assert forever.blocked("h")


def test_worker_variables() -> None:
    base = {names.RANK: "5", "HOROVOD_RANK": "5", "KEEP": "1"}
    env = elastic_worker_environment(base, worker=3, rendezvous_address="127.0.0.1:9", secret=b"s", job_id="j",
                                     start_timeout=10, elastic_timeout=20, hostname="127.0.0.2")
    assert env[names.ELASTIC_WORKER] == "3" and env[names.ELASTIC_TIMEOUT] == "20" and env["KEEP"] == "1"
    assert env[names.HOSTNAME] == env["HOROVOD_HOSTNAME"] == "127.0.0.2"
    assert names.RANK not in env and "HOROVOD_RANK" not in env
    plain = worker_environment(env, rank=0, size=1, rendezvous_address="127.0.0.1:9", secret=b"s", job_id="j",
                               start_timeout=10, hostname="h")
    assert names.ELASTIC_WORKER not in plain  # a job started from an elastic worker is not elastic


def test_world_shm_names_belong_to_the_job() -> None:
    job = "t" + secrets.token_hex(6)
    mine = [f"ring.{names.world_job_id(job, 3)}.0", f"ring.{names.world_job_id(job, 3)}-c.1", f"ring.{job}.0"]
    other = [f"ring.{job}x_g3.0", f"ring.{job}_gx.0"]
    for name in mine + other:
        open(os.path.join(names.SHM_DIR, name), "w").close()
    try:
        assert names.job_shm_paths(job) == sorted(os.path.join(names.SHM_DIR, n) for n in mine)
    finally:
        for name in mine + other:
            try:
                os.unlink(os.path.join(names.SHM_DIR, name))
            except OSError:
                pass


# ---------------------------------------------------------------- the worker's side, against a real store

@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch) -> Iterator[StoreClient]:
    """A store with this process set up as elastic worker 1 of job 'ej'; fresh worker state."""
    secret = secrets.token_bytes(16)
    server = StoreServer(secret)
    server.start()
    for var, value in {names.ELASTIC_WORKER: "1", names.RENDEZVOUS_ADDR: server.address, names.SECRET: secret.hex(),
                       names.JOB_ID: "ej", names.HOSTNAME: "127.0.0.2", names.ELASTIC_TIMEOUT: "5",
                       names.ADVERTISE_HOST: "127.0.0.1"}.items():
        monkeypatch.setenv(var, value)
    monkeypatch.setattr(elastic, "_current", None)
    monkeypatch.setattr(elastic, "_stale", False)
    monkeypatch.setattr(elastic, "_watch", None)
    client = StoreClient(server.address, secret)
    yield client
    elastic.leave_world()
    client.close()
    server.stop()


def _publish(client: StoreClient, world: World) -> None:
    client.set(names.elastic_key("ej", "world", world.generation), world.encode())
    client.set(names.elastic_key("ej", "latest"), str(world.generation).encode())


def test_elastic_worker_finds_its_place(store: StoreClient) -> None:
    assert DETECTION_ORDER[1] is ElasticEnvironment
    _publish(store, form_world(1, [(0, "127.0.0.1"), (1, "127.0.0.2")], None))
    env = detect_environment()
    assert isinstance(env, ElasticEnvironment)
    assert (env.rank, env.size, env.cross_rank, env.cross_size) == (1, 2, 1, 2)
    assert env.world_generation == 1 and env.job_id == "ej_g1" and env.bind_host == "127.0.0.1"
    assert ElasticEnvironment().world_generation == 1  # the same world until the process leaves it
    assert elastic.host_updates() == (False, False)


def test_elastic_worker_follows_the_latest_world(store: StoreClient) -> None:
    w1 = form_world(1, [(0, "a"), (1, "b"), (2, "c")], None)
    _publish(store, w1)
    ElasticEnvironment()
    w2 = form_world(2, [(1, "b"), (2, "c")], w1)
    _publish(store, w2)
    deadline = time.monotonic() + 5
    while elastic.host_updates() == (False, False) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert elastic.host_updates() == (True, True)  # workers only left: no sync needed
    _publish(store, form_world(3, [(1, "b"), (2, "c"), (3, "d")], w2))
    elastic.leave_world()
    env = ElasticEnvironment()
    assert env.world_generation == 3 and env.rank == 0 and env.size == 3  # world 2 was skipped


def test_removed_worker_exits_zero(store: StoreClient) -> None:
    _publish(store, form_world(4, [(0, "a")], None, removed=[1]))
    with pytest.raises(elastic.WorkerRemoved) as e:
        ElasticEnvironment()
    assert isinstance(e.value, SystemExit) and e.value.code == 0


def test_unplaced_worker_times_out(store: StoreClient, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(names.ELASTIC_TIMEOUT, "0.3")
    _publish(store, form_world(1, [(0, "a")], None))
    with pytest.raises(TimeoutError, match=r"no world of job ej placed it within 0.3 s \(RING_ELASTIC_TIMEOUT\)"):
        ElasticEnvironment()


def test_remote_host_removes_the_segments_of_the_worlds_its_worker_joined(tmp_path) -> None:
    """The bootstrap a remote host runs (here without ssh) removes the files
    ringrun names with ``SHM`` lines once its worker exited, and no others."""
    import json
    import subprocess
    import sys

    from ring_strategy.runner.elastic_workers import world_shm_paths
    from ring_strategy.runner.remote import _BOOTSTRAP_PATH, REMOTE_LOADER, bootstrap_spec

    job = f"bootshm{secrets.token_hex(4)}"
    mine = json.loads(world_shm_paths(job, 2, 1)) + json.loads(world_shm_paths(job, 3, 0))
    other = json.loads(world_shm_paths(job, 3, 1))  # a sibling's, on the same host
    for path in mine + other:
        open(path, "wb").close()
    spec = bootstrap_spec(command=[sys.executable, "-c", "import time; time.sleep(0.5)"], cwd=str(tmp_path),
                          job_id=job, grace=1.0, interface=None, env={}, workers={4: {}})
    spec["shm_paths"] = []
    source = open(_BOOTSTRAP_PATH, "rb").read()
    stdin = (b"%d\n" % len(source) + source + json.dumps(spec).encode() + b"\n"
             + b"SHM " + world_shm_paths(job, 2, 1).encode() + b"\n"
             + b"SHM " + world_shm_paths(job, 3, 0).encode() + b"\n")
    try:
        proc = subprocess.Popen([sys.executable, "-u", "-c", REMOTE_LOADER], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE)
        proc.stdin.write(stdin)
        proc.stdin.flush()  # kept open: end of file would stop the worker
        lines = [proc.stdout.readline() for _ in range(3)]  # its threads, the worker's start, its exit
        proc.stdin.close()
        assert proc.wait(30) == 0 and lines[0].startswith(b"t - ") and lines[2] == b"x 4 0\n", lines
        assert [p for p in mine if os.path.exists(p)] == [] and all(os.path.exists(p) for p in other)
    finally:
        for path in mine + other:
            if os.path.exists(path):
                os.unlink(path)
