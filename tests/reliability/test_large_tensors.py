"""Single tensors over 2 GiB and over 2**31 elements (int8) on 2 ranks, over
shared memory and TCP: allreduce, broadcast, an allgather whose result is
3 GiB, and two 1.1 GiB allreduces under RING_FUSION_THRESHOLD=3 GiB; the
peak RSS each rank reports is bounded by a small multiple of the tensor.

Slow (about 10 GiB of memory and a minute): ``make large-tensor-test``, or
``pytest -m slow tests/reliability/test_large_tensors.py``."""

import re

import pytest
from reliability_jobs import WORKERS, run_job

from tests.workers.checks import passed_ranks

CHECKS = ["allreduce", "broadcast", "allgather", "fusion_over_2GiB"]
TENSOR_MIB = (2**31 + 17) / 2**20


@pytest.mark.slow
@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_tensors_over_2_gib(transport):
    job = run_job(2, [WORKERS / "large_tensor.py"], timeout=900,
                  env={"RING_TRANSPORT": transport, "RING_FUSION_THRESHOLD": str(3 * 2**30),
                       "RING_TIMEOUT_SECONDS": "120"})
    for c in CHECKS:
        assert len(passed_ranks(job.output, c)) == 2, f"{c}:\n{job.tail(6000)}"
    assert job.returncode == 0, job.tail()
    peaks = [float(m) for m in re.findall(r"peak rss (\d+) MiB", job.output)]
    assert len(peaks) == 2, job.tail()
    # Input and output of the 2 GiB allreduce, or the 3 GiB gather and its
    # 1.5 GiB input, plus small engine buffers: never more than 2.5 tensors.
    assert max(peaks) < 2.5 * TENSOR_MIB, peaks
    print(f"{transport}: peak RSS per rank {peaks} MiB for {TENSOR_MIB:.0f} MiB tensors")
    assert job.leftover_processes == [] and job.leftover_segments == []
