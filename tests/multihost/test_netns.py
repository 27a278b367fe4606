"""ringrun across hosts: network namespaces joined by a bridge, each with its own
sshd, stand in for machines. ringrun runs in one of them and starts the
workers of the others over ssh, as on a cluster; ranks on one host talk through
shared memory, across hosts over TCP.

Marked ``netns``; skipped unless root with iproute2 and OpenSSH (``make sysdeps``).
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import textwrap
import time
from pathlib import Path

import pytest

from .jobs import REPO_ROOT, ringrun_in, start_ringrun_in
from .netns import Cluster

pytestmark = pytest.mark.netns

PY = __import__("sys").executable
GRID = REPO_ROOT / "tests" / "workers" / "grid.py"
LINE_RATE_GBPS = 0.125  # 1 Gbit/s in GB/s, the unit of the benchmark's busbw


def _script(code: str) -> list:
    return [PY, "-c", textwrap.dedent(code)]


def _by_rank(text: str) -> dict:
    lines: dict = {}
    for line in text.splitlines():
        m = re.match(r"^\[(\d+)\] (.*)$", line)
        if m:
            lines.setdefault(int(m.group(1)), []).append(m.group(2))
    return lines


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, ProcessLookupError):  # gone before, or while, reading
        return True


def _wait_gone(pids, timeout: float = 10.0) -> list:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not all(_gone(p) for p in pids):
        time.sleep(0.05)
    return [p for p in pids if not _gone(p)]


_ENVIRONMENT_WORKER = """
    import json, os, socket, struct
    import numpy as np, ring_strategy as rs

    def tcp_peers():
        \"\"\"Addresses of this process's established TCP connections.\"\"\"
        inodes = set()
        for fd in os.listdir("/proc/self/fd"):
            try:
                target = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
        peers = set()
        with open("/proc/self/net/tcp") as f:
            for row in list(f)[1:]:
                fields = row.split()
                if fields[3] == "01" and fields[9] in inodes:
                    peers.add(socket.inet_ntoa(struct.pack("<I", int(fields[2].split(":")[0], 16))))
        return sorted(peers)

    rs.init()
    total = rs.allreduce(np.full(3, rs.rank() + 1, np.float32), op=rs.Sum)
    secret = os.environ["RING_SECRET"]
    leaks = []
    for pid in filter(str.isdigit, os.listdir("/proc")):  # ssh and sshd included: one process table
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if secret.encode() in cmdline or bytes.fromhex(secret) in cmdline:
            leaks.append(pid)
    keys = ["RING_RANK", "RING_SIZE", "RING_LOCAL_RANK", "RING_LOCAL_SIZE", "RING_CROSS_RANK",
            "RING_CROSS_SIZE", "RING_HOSTNAME", "RING_RENDEZVOUS_ADDR", "RING_ADVERTISE_HOST", "RING_JOB_ID"]
    info = {k: os.environ.get(k) for k in keys}
    info.update(cwd=os.getcwd(), leaks=leaks, secret_length=len(secret), total=total.tolist(),
                tcp_peers=tcp_peers())
    rs.barrier()  # no rank closes its connections before every rank has listed them
    rs.shutdown()
    print(json.dumps(info))
"""


def test_layout_transports_logs_and_secret(cluster: Cluster, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    result = ringrun_in(cluster, 0, [
        "-H", cluster.hosts([2, 2]), "--network-interface", "eth0", "--output-filename", str(logs),
        *_script(_ENVIRONMENT_WORKER),
    ], timeout=60)
    assert result.returncode == 0, result.stderr
    infos = {rank: json.loads(lines[0]) for rank, lines in _by_rank(result.stdout).items()}
    assert sorted(infos) == [0, 1, 2, 3]
    store = infos[0]["RING_RENDEZVOUS_ADDR"]
    assert re.fullmatch(r"10\.99\.0\.10:\d+", store)
    for rank, info in infos.items():
        host = rank // 2
        assert info["RING_SIZE"] == "4"
        assert (info["RING_LOCAL_RANK"], info["RING_LOCAL_SIZE"]) == (str(rank % 2), "2")
        assert (info["RING_CROSS_RANK"], info["RING_CROSS_SIZE"]) == (str(host), "2")
        assert info["RING_HOSTNAME"] == cluster.addresses[host]  # distinct per host: TCP between hosts
        assert info["RING_ADVERTISE_HOST"] == cluster.addresses[host]  # eth0's address there
        assert info["RING_RENDEZVOUS_ADDR"] == store
        assert info["RING_JOB_ID"] == infos[0]["RING_JOB_ID"]
        assert info["cwd"] == str(REPO_ROOT)
        assert info["leaks"] == [] and info["secret_length"] == 64
        assert info["total"] == [10.0, 10.0, 10.0]
        # TCP to the other host only: the rank on the same host is reached through shared memory.
        assert info["tcp_peers"] == [cluster.addresses[1 - host]]
    for rank in range(4):
        written = (logs / f"rank.{rank}" / "stdout").read_text()
        assert json.loads(written)["RING_RANK"] == str(rank)
        assert (logs / f"rank.{rank}" / "stderr").read_text() == ""


# Hierarchical: slow-marked for make test's budget (tests/test_core_collectives.py forces it on one host).
@pytest.mark.parametrize("hierarchical", ["0", pytest.param("1", marks=pytest.mark.slow)])
def test_every_op_across_two_hosts(cluster: Cluster, hierarchical: str) -> None:
    result = ringrun_in(cluster, 0, ["-H", cluster.hosts([2, 2]), PY, str(GRID)],
                        env={"RING_HIERARCHICAL_ALLREDUCE": hierarchical}, timeout=150)
    assert result.returncode == 0, (result.stdout + result.stderr)[-6000:]
    assert result.stdout.count("all checks passed") == 4, result.stdout[-3000:]


def test_every_rank_remote_on_uneven_hosts(cluster: Cluster) -> None:
    # ringrun on the third host, which runs no worker: all three ranks are remote.
    result = ringrun_in(cluster, 2, ["-H", cluster.hosts([2, 1]), *_script("""
        import numpy as np, ring_strategy as rs
        rs.init()
        total = rs.allreduce(np.full(5, rs.rank() + 1, np.float64), op=rs.Sum)
        ranks = rs.allgather(np.array([rs.rank()], np.int32))
        print(total.tolist(), ranks.tolist(), rs.local_rank(), rs.local_size(), rs.cross_rank(), rs.cross_size())
    """)], timeout=60)
    assert result.returncode == 0, result.stderr
    lines = _by_rank(result.stdout)
    expected = {0: "0 2 0 2", 1: "1 2 0 2", 2: "0 1 1 2"}
    for rank, layout in expected.items():
        assert lines[rank] == [f"[6.0, 6.0, 6.0, 6.0, 6.0] [0, 1, 2] {layout}"]


_SLEEPER = """
    import os, subprocess, sys, time
    rank, size = int(os.environ["RING_RANK"]), int(os.environ["RING_SIZE"])
    directory, failing = sys.argv[1], int(sys.argv[2])
    child = subprocess.Popen(["sleep", "60"])  # a grandchild in the worker's group
    path = os.path.join(directory, f"pids{rank}")  # the hosts share this filesystem
    with open(path + ".tmp", "w") as f:
        f.write(f"{os.getpid()} {child.pid}")
    os.rename(path + ".tmp", path)
    if rank == failing:
        while not all(os.path.exists(os.path.join(directory, f"pids{r}")) for r in range(size)):
            time.sleep(0.02)
        sys.exit(3)
    time.sleep(60)
"""


def _sleepers(directory: Path, failing: int = -1) -> list:
    return [*_script(_SLEEPER), str(directory), str(failing)]


def _wait_for_pids(directory: Path, size: int, proc: subprocess.Popen) -> list:
    """The pids of every worker and its grandchild, once all have written them."""
    deadline = time.monotonic() + 30
    while not all((directory / f"pids{r}").exists() for r in range(size)):
        assert proc.poll() is None, proc.communicate(timeout=10)
        assert time.monotonic() < deadline, "the workers did not start"
        time.sleep(0.05)
    return [int(p) for r in range(size) for p in (directory / f"pids{r}").read_text().split()]


def test_failing_remote_rank_stops_every_worker(cluster: Cluster, tmp_path: Path) -> None:
    result = ringrun_in(cluster, 0, ["-H", cluster.hosts([1, 2]), *_sleepers(tmp_path, failing=2)], timeout=60)
    assert result.returncode == 3, result.stderr
    assert "rank 2 exited with code 3" in result.stderr
    pids = [int(p) for r in range(3) for p in (tmp_path / f"pids{r}").read_text().split()]
    assert _wait_gone(pids) == []


def test_interrupt_stops_remote_workers(cluster: Cluster, tmp_path: Path) -> None:
    proc = start_ringrun_in(cluster, 0, ["-H", cluster.hosts([1, 2]), *_sleepers(tmp_path)])
    try:
        pids = _wait_for_pids(tmp_path, 3, proc)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert _wait_gone(pids) == []


def test_killed_ringrun_leaves_no_remote_worker(cluster: Cluster, tmp_path: Path) -> None:
    # ringrun on the third host, every worker remote: closing the sessions must stop them all.
    proc = start_ringrun_in(cluster, 2, ["--grace-period", "1", "-H", cluster.hosts([1, 2]), *_sleepers(tmp_path)])
    try:
        pids = _wait_for_pids(tmp_path, 3, proc)
        proc.kill()
        proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert _wait_gone(pids, timeout=15) == []


def test_missing_program_on_a_remote_host(cluster: Cluster) -> None:
    result = ringrun_in(cluster, 2, ["-H", cluster.hosts([1, 1]), "/nonexistent/program"], timeout=60)
    assert result.returncode == 127
    assert "host 10.99.0.10: rank 0: cannot start '/nonexistent/program'" in result.stderr


def test_unreachable_host_fails_clearly(cluster: Cluster) -> None:
    start = time.monotonic()
    result = ringrun_in(cluster, 0, ["-H", "10.99.0.10:1,10.99.0.99:1", "--start-timeout", "3",
                                     PY, "-c", "pass"], timeout=60)
    assert result.returncode != 0
    assert "host 10.99.0.99" in result.stderr
    assert time.monotonic() - start < 30


def test_wrong_key_fails_clearly(cluster: Cluster, tmp_path: Path) -> None:
    other = tmp_path / "other_key"
    cluster.run_in(0, ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)])
    result = ringrun_in(cluster, 0, ["-H", cluster.hosts([0, 1]), "-i", str(other), PY, "-c", "pass"],
                        timeout=60)
    assert result.returncode == 255
    assert "host 10.99.0.11" in result.stderr and "Permission denied" in result.stderr


def test_allreduce_bandwidth_on_a_1gbit_link(cluster: Cluster, tmp_path: Path,
                                             capsys: pytest.CaptureFixture) -> None:
    report = tmp_path / "bench.json"
    cluster.shape("1gbit")
    try:
        result = ringrun_in(cluster, 0, [
            "-H", cluster.hosts([1, 1]), PY, "-m", "ring_strategy.bench", "--ops", "allreduce",
            "--sizes", "64M", "--iters", "5", "--warmup", "2", "--json", str(report),
        ], timeout=150)
    finally:
        cluster.unshape()
    assert result.returncode == 0, result.stderr
    (row,) = json.loads(report.read_text())
    busbw = row["busbw_gbps"]
    with capsys.disabled():
        print(f"\n[netns] allreduce 64 MiB, 2 hosts x 1 rank, link shaped to 1 Gbit/s: "
              f"busbw {busbw:.4f} GB/s = {100 * busbw / LINE_RATE_GBPS:.1f}% of line rate (target >= 90%)")
    assert row["op"] == "allreduce" and row["ranks"] == 2 and busbw > 0
