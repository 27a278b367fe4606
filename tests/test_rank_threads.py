"""Each rank's share of its host's CPUs (ring_strategy/runner/threads.py):
the variables ringrun gives its workers, and what the frameworks do with
them in a real ringrun -np 2 job."""

from __future__ import annotations

import os
import subprocess
import sys

from ring_strategy.runner import threads


def test_share_of_the_cpus_for_settings_not_set():
    got = threads.thread_variables({}, local_size=2, cpus=8)
    assert got == {"OMP_NUM_THREADS": "4", "MKL_NUM_THREADS": "4", "TF_NUM_INTRAOP_THREADS": "4",
                   "TF_NUM_INTEROP_THREADS": "4",
                   "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=true intra_op_parallelism_threads=4"}
    assert threads.thread_variables({}, local_size=4, cpus=2)["OMP_NUM_THREADS"] == "1"  # at least one


def test_what_the_user_set_is_kept_and_followed():
    env = {"OMP_NUM_THREADS": "3", "TF_NUM_INTEROP_THREADS": "2", "XLA_FLAGS": "--xla_dump_to=/tmp/x"}
    got = threads.thread_variables(env, local_size=2, cpus=8)
    assert got == {"MKL_NUM_THREADS": "3", "TF_NUM_INTRAOP_THREADS": "3",
                   "XLA_FLAGS": "--xla_dump_to=/tmp/x --xla_cpu_multi_thread_eigen=true intra_op_parallelism_threads=3"}
    assert "XLA_FLAGS" not in threads.thread_variables({"XLA_FLAGS": "--xla_cpu_multi_thread_eigen=true"}, 2, 8)
    assert threads.thread_variables({"OMP_NUM_THREADS": "x"}, 2, 8)["MKL_NUM_THREADS"] == "4"  # not a number


_PROBE = ("import os, torch; print('probe', os.environ['RING_RANK'], torch.get_num_threads(), "
          "os.environ['TF_NUM_INTRAOP_THREADS'], os.environ['XLA_FLAGS'], flush=True)")


def test_ringrun_gives_each_rank_its_share_and_says_so_when_verbose():
    env = {k: v for k, v in os.environ.items() if k not in threads.VARIABLES and k != "XLA_FLAGS"}
    done = subprocess.run([sys.executable, "-m", "ring_strategy.runner.launch", "-v", "-np", "2", sys.executable,
                           "-c", _PROBE], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    n = max(1, threads.host_cpus() // 2)
    for rank in (0, 1):
        assert f"probe {rank} {n} {n} " in done.stdout, done.stdout
    assert done.stderr.count(f"each rank computes with {n} thread") == 1, done.stderr  # said once, with -v


def _bootstrap(spec: dict) -> list:
    """The lines the bootstrap of another host, run here as ssh would run it
    (no thread settings in its login environment), reports for ``spec``."""
    import json

    from ring_strategy.runner.remote import _BOOTSTRAP_PATH, REMOTE_LOADER

    env = {k: v for k, v in os.environ.items() if k not in threads.VARIABLES and k != "XLA_FLAGS"}
    source = open(_BOOTSTRAP_PATH, "rb").read()
    proc = subprocess.Popen([sys.executable, "-u", "-c", REMOTE_LOADER], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, env=env)
    proc.stdin.write(b"%d\n" % len(source) + source + json.dumps(spec).encode() + b"\n")
    proc.stdin.flush()  # kept open until the worker exited: end of file would stop it
    lines = []
    while not lines or not lines[-1].startswith("x "):
        lines.append(proc.stdout.readline().decode().rstrip("\n"))
        assert lines[-1], lines
    proc.stdin.close()
    assert proc.wait(30) == 0 and lines[-1] == "x 3 0", lines
    return lines


def test_another_hosts_bootstrap_gives_each_rank_its_share_of_that_host(tmp_path):
    from ring_strategy.runner.remote import bootstrap_spec

    probe = "import os; print(os.environ['OMP_NUM_THREADS'], os.environ['TF_NUM_INTEROP_THREADS'], os.environ['X'])"
    spec = bootstrap_spec(command=[sys.executable, "-c", probe], cwd=str(tmp_path), job_id="threadsboot", grace=1.0,
                          interface=None, env={"X": "x"}, workers={3: {}}, local_size=2)
    n = max(1, threads.host_cpus() // 2)  # its host's CPUs (here: this one) among the host's 2 slots
    lines = _bootstrap({**spec, "shm_paths": []})
    assert lines[0] == f"t - {threads.describe({}, 2)}", lines  # what ringrun -v prints for the host
    assert f"o 3 {n} {n} x" in lines, lines
    spec["env"]["OMP_NUM_THREADS"] = "5"  # the user's, sent along, wins there too
    assert "o 3 5 5 x" in _bootstrap({**spec, "shm_paths": []})


def test_a_running_process_takes_its_share_and_tells_torch(monkeypatch):
    calls = []
    monkeypatch.setitem(sys.modules, "torch", type("Torch", (), {"set_num_threads": staticmethod(calls.append)}))
    env = {"TF_NUM_INTRAOP_THREADS": "7"}
    added = threads.apply_here(4, env)
    n = str(max(1, threads.host_cpus() // 4))
    assert env["OMP_NUM_THREADS"] == n and env["TF_NUM_INTRAOP_THREADS"] == "7" and "TF_NUM_INTRAOP_THREADS" not in added
    assert calls == [int(n)]  # torch read OMP_NUM_THREADS when it loaded: told directly
    calls.clear()
    threads.apply_here(4, {"OMP_NUM_THREADS": "3"})
    assert calls == []  # the user's choice: torch already follows it


def test_lightning_self_launch_gives_every_rank_its_share_and_rank_0_says_so():
    probe = "import os; print('rank 1', os.environ['OMP_NUM_THREADS'], os.environ['TF_NUM_INTRAOP_THREADS'])"
    code = ("import os, sys\nfrom ring_strategy.lightning._spawn import start_workers\n"
            f"start_workers(2, [sys.executable, '-c', {probe!r}])\n"
            "print('rank 0', os.environ['OMP_NUM_THREADS'], os.environ['TF_NUM_INTRAOP_THREADS'], flush=True)\n")
    env = {k: v for k, v in os.environ.items() if k not in threads.VARIABLES and k != "XLA_FLAGS"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    n = max(1, threads.host_cpus() // 2)
    assert f"rank 0 {n} {n}" in done.stdout and f"rank 1 {n} {n}" in done.stdout, done.stdout
    assert done.stderr == f"ring_strategy.lightning: {threads.describe({}, 2)}\n", done.stderr  # once, by rank 0


def test_ray_actor_takes_its_share_of_its_node_and_worker_0_says_so(monkeypatch, capsys):
    from ring_strategy.ray.worker import RingWorker

    for rank, told in (("0", True), ("1", False)):
        monkeypatch.setattr(os, "environ", {"OMP_NUM_THREADS": "3"})  # as Ray sets it: the actor's CPUs
        RingWorker().set_env({"RING_RANK": rank, "RING_LOCAL_SIZE": "2"})
        assert os.environ["TF_NUM_INTRAOP_THREADS"] == "3" and os.environ["MKL_NUM_THREADS"] == "3"
        err = capsys.readouterr().err
        assert err == (f"ring_strategy.ray: {threads.describe({'OMP_NUM_THREADS': '3'}, 2)}\n" if told else ""), err


def test_spark_worker_process_computes_with_its_share(monkeypatch):
    from ring_strategy.spark.spec import JobSpec
    from ring_strategy.spark.task import WorkerProcess

    monkeypatch.setattr(os, "environ", {})
    spec = JobSpec(job_id="j", secret=b"s", rendezvous_address="127.0.0.1:1", size=4, start_timeout=1.0, payload=b"")
    assert WorkerProcess(spec, 2, {}, [], local_size=2, cpus=8).env["OMP_NUM_THREADS"] == "4"  # a rank of 2 here
    assert WorkerProcess(spec, 2, {}, [], cpus=3).env["TF_NUM_INTEROP_THREADS"] == "3"  # an elastic task's CPUs
