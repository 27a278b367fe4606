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
