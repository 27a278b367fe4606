"""A rank blocked in a wait answers Python signals (issue: reliability,
round two, item 1): SIGALRM (pytest-timeout's method, job wrappers) and
SIGINT (Ctrl-C) raise out of synchronize (of a grouped operation too),
blocking collectives and barrier within a fraction of a second, for numpy, torch and TensorFlow eager (Keras'
collectives are the numpy core's); the operation stays in flight and can be
synchronized again, or shutdown() ends the job on every rank with a clear
error. Workers: tests/reliability/workers/signals.py."""

import pytest
from reliability_jobs import WORKERS, run_job

from tests.workers.checks import passed_ranks

SCENARIOS = ["numpy_async", "numpy_group", "numpy_sync", "numpy_barrier", "torch_handle"]


# TensorFlow's eager wait is the engine wait torch's is; importing TensorFlow in
# both workers costs 10 s of make test's budget: slow-marked (pytest -m slow).
@pytest.mark.parametrize("scenarios", [SCENARIOS, pytest.param(["tensorflow_eager"], marks=pytest.mark.slow)])
def test_signals_come_out_of_waits(scenarios):
    job = run_job(2, [WORKERS / "signals.py", *scenarios], timeout=180,
                  env={"TF_CPP_MIN_LOG_LEVEL": "2", "OMP_NUM_THREADS": "1"})
    for s in scenarios:
        assert len(passed_ranks(job.output, s)) == 2, f"{s}:\n{job.tail(8000)}"
    assert job.returncode == 0, job.tail()
    assert job.leftover_processes == [] and job.leftover_segments == []


def test_shutdown_after_an_interrupted_wait_ends_the_job_cleanly():
    job = run_job(2, [WORKERS / "signals.py", "leave"], timeout=120)
    assert "0: leave ok" in job.output and "1: leave ok" in job.output, job.tail(8000)
    assert job.leftover_processes == [] and job.leftover_segments == []
