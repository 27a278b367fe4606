"""Tests of ringrun with real processes and plain Python workers (no engine).

Jobs start through :mod:`tests.jobs`; the tests of ringrun's own signal
handling (SIGINT or SIGTERM to ringrun, ringrun killed) signal the process
:func:`tests.jobs.start_job` returned themselves, since that is what they test.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.jobs import ringrun_command, run_job, run_ringrun, start_job

PY = sys.executable


def _script(code: str) -> list:
    return [PY, "-c", textwrap.dedent(code)]


def _lines_by_rank(text: str) -> dict:
    by_rank: dict = {}
    for line in text.splitlines():
        m = re.match(r"^\[(\d+)\] (.*)$", line)
        assert m, f"line without a [rank] prefix: {line!r}"
        by_rank.setdefault(int(m.group(1)), []).append(m.group(2))
    return by_rank


def _gone(pid: int) -> bool:
    """True when pid no longer runs (a zombie waiting for its reaper counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def _wait_gone(pids, timeout: float = 5.0) -> list:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = [p for p in pids if not _gone(p)]
        if not alive:
            return []
        time.sleep(0.05)
    return [p for p in pids if not _gone(p)]


@pytest.mark.parametrize("np", [1, 2, 3, 4])
def test_worker_environment(ringrun, np):
    result = ringrun(np, _script("""
        import json, os
        keys = ["RING_RANK", "RING_SIZE", "RING_LOCAL_RANK", "RING_LOCAL_SIZE",
                "RING_CROSS_RANK", "RING_CROSS_SIZE", "RING_RENDEZVOUS_ADDR",
                "RING_SECRET", "RING_JOB_ID", "RING_HOSTNAME", "PYTHONUNBUFFERED"]
        print(json.dumps({k: os.environ.get(k) for k in keys}))
    """), timeout=60)
    assert result.returncode == 0, result.stderr
    by_rank = _lines_by_rank(result.stdout)
    assert sorted(by_rank) == list(range(np))
    envs = {rank: json.loads(lines[0]) for rank, lines in by_rank.items()}
    first = envs[0]
    assert re.fullmatch(r"127\.0\.0\.1:\d+", first["RING_RENDEZVOUS_ADDR"])
    assert re.fullmatch(r"[0-9a-f]{64}", first["RING_SECRET"])
    assert re.fullmatch(r"[0-9a-f]{16}", first["RING_JOB_ID"])
    for rank, env in envs.items():
        assert env["RING_RANK"] == str(rank)  # the prefix is the rank
        assert env["RING_SIZE"] == str(np)
        assert env["RING_LOCAL_RANK"] == str(rank)
        assert env["RING_LOCAL_SIZE"] == str(np)
        assert env["RING_CROSS_RANK"] == "0"
        assert env["RING_CROSS_SIZE"] == "1"
        assert env["PYTHONUNBUFFERED"] == "1"
        assert env["RING_HOSTNAME"] == first["RING_HOSTNAME"]
        for shared in ("RING_RENDEZVOUS_ADDR", "RING_SECRET", "RING_JOB_ID"):
            assert env[shared] == first[shared]


def test_each_job_gets_a_fresh_secret_and_id(ringrun):
    code = _script("import os; print(os.environ['RING_SECRET'], os.environ['RING_JOB_ID'])")
    a = ringrun(1, code, timeout=60)
    b = ringrun(1, code, timeout=60)
    assert a.returncode == b.returncode == 0
    sa, ja = a.stdout.split()[1:]
    sb, jb = b.stdout.split()[1:]
    assert sa != sb and ja != jb


def test_output_is_prefixed_line_by_line(ringrun):
    result = ringrun(3, _script("""
        import os, sys
        r = os.environ["RING_RANK"]
        for i in range(300):
            print(f"rank {r} line {i} " + "x" * 50)
            if i % 3 == 0:
                print(f"rank {r} err {i}", file=sys.stderr)
        sys.stdout.write(f"rank {r} partial")
    """), timeout=60)
    assert result.returncode == 0, result.stderr
    out = _lines_by_rank(result.stdout)
    err = _lines_by_rank(result.stderr)
    for rank in range(3):
        lines = out[rank]
        expected = [f"rank {rank} line {i} " + "x" * 50 for i in range(300)]
        assert lines == expected + [f"rank {rank} partial"]
        assert err[rank] == [f"rank {rank} err {i}" for i in range(0, 300, 3)]


def test_first_failure_code_is_returned_and_others_terminated(ringrun, tmp_path):
    result = ringrun(3, _script(f"""
        import os, sys, time
        rank = int(os.environ["RING_RANK"])
        d = {str(tmp_path)!r}
        open(os.path.join(d, f"pid{{rank}}.tmp"), "w").write(str(os.getpid()))
        os.rename(os.path.join(d, f"pid{{rank}}.tmp"), os.path.join(d, f"pid{{rank}}"))
        if rank == 1:
            while not all(os.path.exists(os.path.join(d, f"pid{{r}}")) for r in range(3)):
                time.sleep(0.02)
            sys.exit(3)
        time.sleep(60)
    """), timeout=30)
    assert result.returncode == 3
    assert "rank 1 exited with code 3" in result.stderr
    pids = [int((tmp_path / f"pid{r}").read_text()) for r in range(3)]
    assert _wait_gone(pids) == []


def test_signal_death_gives_128_plus_signal(ringrun):
    result = ringrun(2, _script("""
        import os, signal, time
        if os.environ["RING_RANK"] == "0":
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(60)
    """), timeout=30)
    assert result.returncode == 128 + signal.SIGKILL
    assert "rank 0 was killed by SIGKILL" in result.stderr


def test_worker_ignoring_sigterm_is_killed_after_grace(ringrun, tmp_path):
    start = time.monotonic()
    result = ringrun(2, ["--grace-period", "1", *_script(f"""
        import os, signal, sys, time
        rank = os.environ["RING_RANK"]
        path = os.path.join({str(tmp_path)!r}, "pid")
        if rank == "1":
            while not os.path.exists(path):
                time.sleep(0.02)
            sys.exit(7)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        open(path + ".tmp", "w").write(str(os.getpid()))
        os.rename(path + ".tmp", path)
        time.sleep(60)
    """)], timeout=30)
    assert result.returncode == 7
    assert time.monotonic() - start < 15
    assert _wait_gone([int((tmp_path / "pid").read_text())]) == []


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_to_ringrun_leaves_no_process_behind(tmp_path, sig, code):
    worker = textwrap.dedent(f"""
        import os, subprocess, time
        rank = os.environ["RING_RANK"]
        child = subprocess.Popen(["sleep", "60"])  # a grandchild, same process group
        path = os.path.join({str(tmp_path)!r}, f"pids{{rank}}")
        open(path + ".tmp", "w").write(f"{{os.getpid()}} {{child.pid}}")
        os.rename(path + ".tmp", path)
        time.sleep(60)
    """)
    proc = start_job(ringrun_command(2, [PY, "-c", worker]))
    try:
        deadline = time.monotonic() + 20
        while not all((tmp_path / f"pids{r}").exists() for r in range(2)):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "workers did not start"
            time.sleep(0.05)
        pids = [int(p) for r in range(2) for p in (tmp_path / f"pids{r}").read_text().split()]
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == code, err
    assert _wait_gone(pids) == []


def _kill_ringrun(tmp_path, launcher_args, before_init="") -> float:
    """Starts two workers that sleep after init(), kills ringrun with SIGKILL
    and returns the seconds until both workers are gone."""
    worker = textwrap.dedent(f"""
        import os, signal, time
        import ring_strategy as rs
        {before_init}
        rs.init()
        path = os.path.join({str(tmp_path)!r}, f"pid{{rs.rank()}}")
        open(path + ".tmp", "w").write(str(os.getpid()))
        os.rename(path + ".tmp", path)
        time.sleep(60)
    """)
    proc = start_job(ringrun_command(2, [*launcher_args, PY, "-c", worker]))
    pids = []
    try:
        deadline = time.monotonic() + 60
        while not all((tmp_path / f"pid{r}").exists() for r in range(2)):
            assert proc.poll() is None, "ringrun ended before its workers started"
            assert time.monotonic() < deadline, "workers did not start"
            time.sleep(0.05)
        pids = [int((tmp_path / f"pid{r}").read_text()) for r in range(2)]
        proc.kill()
        killed = time.monotonic()
        proc.wait(timeout=10)
        assert _wait_gone(pids, timeout=10) == []
        return time.monotonic() - killed
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in pids:
            if not _gone(pid):
                os.kill(pid, signal.SIGKILL)


def test_killed_ringrun_stops_its_workers(tmp_path):
    # SIGKILL gives ringrun no chance to stop anything: the workers notice
    # that the pipe it left them is closed and stop themselves.
    _kill_ringrun(tmp_path, [])


def test_killed_ringrun_workers_ignoring_sigterm_end_after_its_grace_period(tmp_path):
    # The default grace period is 5 s: gone well before that, the workers
    # used the --grace-period ringrun was given.
    seconds = _kill_ringrun(tmp_path, ["--grace-period", "0.5"],
                            before_init="signal.signal(signal.SIGTERM, signal.SIG_IGN)")
    assert seconds < 4.0, f"workers took {seconds:.1f} s to end"


def test_secret_is_on_no_command_line(ringrun):
    result = ringrun(2, _script("""
        import os
        secret = os.environ["RING_SECRET"]
        found = []
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        cmdline = f.read()
                except OSError:
                    continue
                if secret.encode() in cmdline or bytes.fromhex(secret) in cmdline:
                    found.append(pid)
        print("found" if found else "clean", len(secret))
    """), timeout=60)
    assert result.returncode == 0, result.stderr
    assert _lines_by_rank(result.stdout) == {0: ["clean 64"], 1: ["clean 64"]}


def test_workers_rendezvous_through_the_store(ringrun):
    result = ringrun(4, _script("""
        import os
        from ring_strategy.runner.store import StoreClient
        rank, size = int(os.environ["RING_RANK"]), int(os.environ["RING_SIZE"])
        client = StoreClient(os.environ["RING_RENDEZVOUS_ADDR"],
                             bytes.fromhex(os.environ["RING_SECRET"]), timeout=30)
        client.set(f"addr/{rank}", f"peer-{rank}".encode())
        client.add("arrived", 1)
        peers = [client.get(f"addr/{r}").decode() for r in range(size)]
        print(" ".join(peers))
    """), timeout=60)
    assert result.returncode == 0, result.stderr
    lines = _lines_by_rank(result.stdout)
    assert all(v == ["peer-0 peer-1 peer-2 peer-3"] for v in lines.values())


def test_shared_memory_segments_of_the_job_are_removed(ringrun):
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm")
    result = ringrun(2, _script("""
        import os
        path = f"/dev/shm/ring.{os.environ['RING_JOB_ID']}.{os.environ['RING_RANK']}"
        open(path, "w").write("segment")
        print(path)
    """), timeout=60)
    assert result.returncode == 0, result.stderr
    paths = [v[0] for v in _lines_by_rank(result.stdout).values()]
    assert len(paths) == 2
    assert not any(os.path.exists(p) for p in paths)


def test_hosts_option(ringrun):
    code = _script("import os; print(os.environ['RING_SIZE'])")
    ok = ringrun(1, ["-H", "localhost:2", *code], timeout=60)
    assert ok.returncode == 0, ok.stderr
    too_many = ringrun(3, ["-H", "localhost:2", *code], timeout=60)
    assert too_many.returncode == 2 and "slots" in too_many.stderr


def test_hostfile(ringrun, tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# this machine\nlocalhost slots=3  # three workers\n\n")
    code = _script("import os; print(os.environ['RING_SIZE'], os.environ['RING_LOCAL_SIZE'])")
    ok = ringrun(2, ["--hostfile", str(hostfile), *code], timeout=60)
    assert ok.returncode == 0, ok.stderr
    assert _lines_by_rank(ok.stdout) == {0: ["2 2"], 1: ["2 2"]}
    hostfile.write_text("localhost slots=2\nlocalhost slots=two\n")
    bad = ringrun(2, ["--hostfile", str(hostfile), *code], timeout=60)
    assert bad.returncode == 2 and "line 2" in bad.stderr and "'two'" in bad.stderr
    both = ringrun(2, ["--hostfile", str(hostfile), "-H", "localhost:2", *code], timeout=60)
    assert both.returncode == 2 and "not allowed with" in both.stderr


def test_two_names_of_this_machine_are_two_hosts(ringrun):
    result = ringrun(3, ["-H", "localhost:2,127.0.0.1:2", *_script("""
        import json, os
        keys = ["RING_LOCAL_RANK", "RING_LOCAL_SIZE", "RING_CROSS_RANK", "RING_CROSS_SIZE",
                "RING_HOSTNAME", "RING_ADVERTISE_HOST", "RING_RENDEZVOUS_ADDR"]
        print(json.dumps([os.environ.get(k) for k in keys]))
    """)], timeout=60)
    assert result.returncode == 0, result.stderr
    envs = {rank: json.loads(lines[0]) for rank, lines in _lines_by_rank(result.stdout).items()}
    assert [e[:5] for _, e in sorted(envs.items())] == [
        ["0", "2", "0", "2", "localhost"], ["1", "2", "0", "2", "localhost"], ["0", "1", "1", "2", "127.0.0.1"],
    ]
    for env in envs.values():  # nothing leaves loopback: every "host" is this machine
        assert env[5] == "127.0.0.1" and env[6].startswith("127.0.0.1:")


def test_two_hosts_of_this_machine_run_the_engine(ringrun):
    result = ringrun(4, ["-H", "localhost:2,127.0.0.1:2", *_script("""
        import numpy as np, ring_strategy as rs
        rs.init()
        total = rs.allreduce(np.full(1001, rs.rank() + 1, np.float32), op=rs.Sum)
        print(float(total.min()), float(total.max()), rs.local_rank(), rs.cross_rank(), rs.cross_size())
    """)], timeout=120)
    assert result.returncode == 0, result.stderr
    lines = _lines_by_rank(result.stdout)
    assert lines == {r: [f"10.0 10.0 {r % 2} {r // 2} 2"] for r in range(4)}


@pytest.mark.parametrize("hosts, message", [
    ("localhost:1,localhost:2", "listed more than once"),
    ("localhost:1,127.0.0.1:1", "more than the 2 slots"),
    ("localhost:0", "positive integer"),
    ("localhost:1,-oProxyCommand=x:1", "should not start with '-'"),
])
def test_bad_host_lists(ringrun, hosts, message):
    result = ringrun(3, ["-H", hosts, PY, "-c", "pass"], timeout=60)
    assert result.returncode == 2
    assert message in result.stderr


@pytest.mark.skipif(shutil.which("ssh") is None, reason="needs the ssh client")
def test_unknown_host_fails_clearly(ringrun):
    result = ringrun(2, ["-H", "localhost:1,nonexistent.invalid:1", "--start-timeout", "5",
                         PY, "-c", "import time; time.sleep(30)"], timeout=60)
    assert result.returncode == 255
    assert "host nonexistent.invalid" in result.stderr
    assert "rank 1 exited with code 255" in result.stderr


def test_output_filename_writes_per_rank_logs(ringrun, tmp_path):
    logs = tmp_path / "logs"
    result = ringrun(11, ["--output-filename", str(logs), *_script("""
        import os, sys
        rank = os.environ["RING_RANK"]
        print(f"out {rank}")
        print(f"err {rank}", file=sys.stderr)
        sys.stdout.write("no newline")
    """)], timeout=120)
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in logs.iterdir()) == [f"rank.{r:02d}" for r in range(11)]
    for rank in range(11):
        assert (logs / f"rank.{rank:02d}" / "stdout").read_text() == f"out {rank}\nno newline\n"
        assert (logs / f"rank.{rank:02d}" / "stderr").read_text() == f"err {rank}\n"
    assert _lines_by_rank(result.stdout)[3] == ["out 3", "no newline"]  # the console still gets it


@pytest.mark.parametrize("option, value", [
    ("--grace-period", "-1"), ("--grace-period", "inf"), ("--grace-period", "nan"),
    ("--start-timeout", "0"), ("--start-timeout", "inf"), ("--start-timeout", "nan"),
])
def test_bad_seconds_are_refused(ringrun, option, value):
    result = ringrun(1, [option, value, PY, "-c", "pass"], timeout=60)
    assert result.returncode == 2
    assert f"{option} should be a" in result.stderr and f"Got: {value}" in result.stderr


def test_ssh_options_are_checked(ringrun, tmp_path):
    code = [PY, "-c", "pass"]
    assert ringrun(1, ["--ssh-port", "0", *code], timeout=60).returncode == 2
    missing = ringrun(1, ["-i", str(tmp_path / "no_key"), *code], timeout=60)
    assert missing.returncode == 2 and "no such file" in missing.stderr
    quoted = ringrun(1, code, env={"RING_SSH_ARGS": "-o 'unclosed"}, timeout=60)
    assert quoted.returncode == 2 and "RING_SSH_ARGS" in quoted.stderr


def test_remote_start_command_line_has_no_secret():
    from ring_strategy.runner.remote import SshSettings, remote_command, ssh_command

    settings = SshSettings(port=2222, identity_file="/keys/id", connect_timeout=7.5,
                           extra_args=("-o", "UserKnownHostsFile=/dev/null"))
    cmd = ssh_command("node1", settings, remote_command("/venv/bin/python", "abc123"))
    assert cmd[:2] == ["ssh", "-T"]
    assert cmd[cmd.index("-p") + 1] == "2222" and cmd[cmd.index("-i") + 1] == "/keys/id"
    assert "ConnectTimeout=8" in cmd and "BatchMode=yes" in cmd
    assert cmd[-2] == "node1"
    assert "RING_" not in cmd[-1] and "/venv/bin/python" in cmd[-1] and "abc123" in cmd[-1]


def test_slots_give_the_number_of_workers_without_np():
    code = "import os; print(os.environ['RING_SIZE'])"
    result = run_ringrun(None, ["-H", "localhost:3", PY, "-c", code], timeout=60)
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.split()) == ["3", "3", "3", "[0]", "[1]", "[2]"]


def test_bad_command_lines(ringrun):
    assert ringrun(2, [], timeout=60).returncode == 2
    assert ringrun(0, [PY, "-c", "pass"], timeout=60).returncode == 2
    missing = ringrun(2, ["/nonexistent/program"], timeout=60)
    assert missing.returncode == 127 and "/nonexistent/program" in missing.stderr


@pytest.mark.skipif(shutil.which("ringrun") is None, reason="ringrun is not installed")
def test_console_script():
    # The installed script, with this process's environment as it is.
    result = run_job(["ringrun", "-np", "2", PY, "-c", "import os; print(os.environ['RING_RANK'])"],
                     env=dict(os.environ), cwd=Path.home(), timeout=60)
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.splitlines()) == ["[0] 0", "[1] 1"]


def test_launcher_watch_needs_the_very_pipe(tmp_path):
    # A process that inherited the variable but not the pipe may have another
    # file under that number: it must not be watched (read from, or taken
    # for a dead ringrun when it ends).
    from ring_strategy.launcher_watch import _launcher_fd

    read_end, write_end = os.pipe()
    try:
        inode = os.fstat(read_end).st_ino
        assert _launcher_fd({"RING_LAUNCHER_PIPE": f"{read_end}:{inode}"}) == read_end
        assert _launcher_fd({"RING_LAUNCHER_PIPE": f"{read_end}:{inode + 1}"}) is None
        with open(tmp_path / "f", "w") as f:
            same = f"{f.fileno()}:{os.fstat(f.fileno()).st_ino}"
            assert _launcher_fd({"RING_LAUNCHER_PIPE": same}) is None
        for bad in ("", "x", "1:2:3", "99999:1"):
            assert _launcher_fd({"RING_LAUNCHER_PIPE": bad}) is None
        assert _launcher_fd({}) is None
    finally:
        os.close(read_end)
        os.close(write_end)
