"""The NCCL backend at several ranks, its hierarchical allreduce
(native/engine/backends/gpu/nccl_hierarchical.h) and its failure paths
(native/engine/backends/gpu/gpu_wait.h, finalizer.h), run for real on the
CPU over the CUDA and NCCL stand-ins (stub_cuda.c; stub_nccl.c, whose communicators join processes of this
machine through shared memory). Hosts are names of this machine (``-H
localhost:N,127.0.0.1:N``). What they cannot show (device memory, streams,
NCCL's own algorithms) is tests/gpu/device_check.sh's part, on a GPU.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from tests.gpu.stubs import HERE
from tests.jobs import run_ringrun

WORKER = HERE / "workers" / "hierarchical_worker.py"
LIFECYCLE = HERE / "workers" / "lifecycle_worker.py"
TWO_HOSTS = ["-H", "localhost:1,127.0.0.1:1"]


def _job(stub_driver: Path, stub_nccl: Path, tmp_path: Path, mode: str, np: int = 2, hosts=TWO_HOSTS,
         timeout: float = 120, worker: Path = WORKER, **extra: str):
    log = tmp_path / "nccl.log"
    env = {"RING_CUDA_DRIVER_LIBRARY": str(stub_driver), "RING_NCCL_LIBRARY": str(stub_nccl),
           "STUB_NCCL_LOG": str(log), "RING_HIERARCHICAL_ALLREDUCE": "1", "STUB_CUDA_DEVICES": str(np), **extra}
    result = run_ringrun(np, [*hosts, sys.executable, worker, *mode.split()], env=env, timeout=timeout,
                         merge_output=True)
    calls = [line.split() for line in log.read_text().splitlines()] if log.exists() else []
    # Either init (non-blocking, NCCL 2.14 and later, or blocking) is the communicator's creation.
    return result, [["ncclCommInitRank", *c[1:]] if c[0] == "ncclCommInitRankConfig" else c for c in calls]


def _raised(stdout: str):
    """The workers' "RAISED <rank> <error>" lines, without ringrun's "[rank] " prefix."""
    return [line.split("] ", 1)[-1] for line in stdout.splitlines() if "] RAISED " in line]


def test_hierarchical_allreduce_matches_the_cpu_path(stub_driver, stub_nccl, tmp_path) -> None:
    result, calls = _job(stub_driver, stub_nccl, tmp_path, "ops")
    assert result.returncode == 0 and "OK 0" in result.stdout and "OK 1" in result.stdout, result.stdout
    names = [c[0] for c in calls]
    # Each rank made one communicator, of its host's one rank; every allreduce ran as a
    # reduce-scatter and an allgather inside the host, never as NCCL's own allreduce.
    assert [c for c in calls if c[0] == "ncclCommInitRank"] == [["ncclCommInitRank", "1"]] * 2
    assert "ncclAllReduce" not in names
    assert names.count("ncclReduceScatter") == names.count("ncclAllGather") >= 2 * 23


@pytest.mark.parametrize("streams, kernel", [("1", True), ("2", True), ("1", False)])
def test_nccl_backend_at_two_ranks_matches_the_cpu_path(stub_driver, stub_nccl, tmp_path, streams: str,
                                                         kernel: bool) -> None:
    """Two ranks of one host over two-rank communicators (one per engine stream, taken in
    turn): every reduction x dtype, fused tensors, broadcast, allgather of different first
    dimensions, alltoall with uneven splits, reducescatter of even and uneven rows, bitwise
    against the CPU path. Fused tensors are copied by the batched-copy kernel (the stand-in
    driver runs its contract), or one by one where the driver cannot load it."""
    cuda_log = tmp_path / "cuda.log"
    result, calls = _job(stub_driver, stub_nccl, tmp_path, "ops collectives", hosts=[],
                         RING_HIERARCHICAL_ALLREDUCE="0", RING_NUM_NCCL_STREAMS=streams, STUB_CUDA_LOG=str(cuda_log),
                         **({} if kernel else {"STUB_CUDA_NO_MODULES": "1"}))
    assert result.returncode == 0 and "OK 0" in result.stdout and "OK 1" in result.stdout, result.stdout
    names = [c[0] for c in calls]
    assert [c for c in calls if c[0] == "ncclCommInitRank"] == [["ncclCommInitRank", "2"]] * 2 * int(streams)
    for call in ("ncclAllReduce", "ncclBroadcast", "ncclSend", "ncclRecv", "ncclReduceScatter", "ncclReduce"):
        assert call in names, call
    # Issue 40, item 8: the allgathers of as many rows on every rank (one per dtype) are NCCL's own.
    assert names.count("ncclAllGather") == 4 * 2, names
    launches = [line for line in cuda_log.read_text().splitlines() if line.startswith("kernel ")]
    if kernel:
        assert launches and "batched-copy kernel did not load" not in result.stdout
    else:
        assert not launches and "batched-copy kernel did not load" in result.stdout, result.stdout


def test_overlapping_process_sets_get_their_own_communicators_and_give_them_back(stub_driver, stub_nccl, tmp_path) -> None:
    result, calls = _job(stub_driver, stub_nccl, tmp_path, "sets", np=3, hosts=[], RING_HIERARCHICAL_ALLREDUCE="0")
    assert result.returncode == 0 and all(f"OK {r}" in result.stdout for r in range(3)), result.stdout
    # Two communicators of two ranks each (rank 1 joined both), then the global set's.
    inits = [c for c in calls if c[0] == "ncclCommInitRank"]
    assert inits == [["ncclCommInitRank", "2"]] * 4 + [["ncclCommInitRank", "3"]] * 3
    # Removing the sets destroyed their four communicators while the job ran.
    last_done = max(i for i, c in enumerate(calls) if c[0] == "worker-done")
    assert [c for c in calls[:last_done] if c[0] == "ncclCommDestroy"] == [["ncclCommDestroy", "2"]] * 4


def test_hierarchical_allreduce_two_hosts_of_two_ranks(stub_driver, stub_nccl, tmp_path) -> None:
    """Each host's two ranks share a communicator: 1001 elements are two shards of 501 (one
    element of padding), each allreduced across the hosts by the CPU ring."""
    result, calls = _job(stub_driver, stub_nccl, tmp_path, "ops", np=4, hosts=["-H", "localhost:2,127.0.0.1:2"])
    assert result.returncode == 0 and all(f"OK {r}" in result.stdout for r in range(4)), result.stdout
    assert [c for c in calls if c[0] == "ncclCommInitRank"] == [["ncclCommInitRank", "2"]] * 4
    assert ["ncclReduceScatter", "501"] in calls and ["ncclAllGather", "501"] in calls
    assert "ncclAllReduce" not in [c[0] for c in calls]


@pytest.mark.parametrize("mode, error", [("fail", "PeerFailureError"), ("hang", "RingTimeoutError")])
def test_gpu_work_that_fails_or_hangs_raises_on_every_rank(stub_driver, stub_nccl, tmp_path, mode, error) -> None:
    """Rank 0's NCCL stage never finishes: with NCCL's remote error it is a lost peer at once;
    without one, the job times out after RING_TIMEOUT_SECONDS. Either way both ranks raise."""
    result, _ = _job(stub_driver, stub_nccl, tmp_path, mode, RING_TIMEOUT_SECONDS="2")
    raised = _raised(result.stdout)
    assert sorted(line.split()[1] for line in raised) == ["0", "1"], result.stdout
    assert all(error in line for line in raised), result.stdout
    if mode == "fail":
        assert any("remote process exited" in line for line in raised), result.stdout
    assert not result.timed_out


def test_lost_peer_aborts_communicators_after_the_finalizer_stops_polling(stub_driver, stub_nccl, tmp_path) -> None:
    """Issue 40, item 2: the finalizer is polling rank 0's communicator (its work never finishes) when
    rank 1 leaves. The abort must not free the communicator under the finalizer's
    ncclCommGetAsyncError (the stand-in ends the process on a use after abort)."""
    result, calls = _job(stub_driver, stub_nccl, tmp_path, "lost", worker=LIFECYCLE, hosts=[], RING_HIERARCHICAL_ALLREDUCE="0",
                         RING_TIMEOUT_SECONDS="3")
    assert "use after free" not in result.stdout, result.stdout
    raised = _raised(result.stdout)
    assert len(raised) == 1 and raised[0].startswith("RAISED 0 PeerFailureError"), result.stdout
    assert "OK 1" in result.stdout and result.returncode == 0, result.stdout
    assert ["ncclCommAbort", "2"] in calls


@pytest.mark.parametrize("config", [True, False], ids=["nonblocking-init", "nccl-before-2.14"])
def test_rank_that_never_joins_the_communicator_fails_every_rank(stub_driver, tmp_path, config: bool) -> None:
    """Issue 40, item 3: rank 1 never arrives at ncclCommInitRank (the stand-in's blocks with no
    limit, as NCCL's does). Both ranks raise PeerFailureError after RING_TIMEOUT_SECONDS: a
    non-blocking init polled and aborted, or (NCCL without ncclCommInitRankConfig) a blocking one
    on a thread of its own, given up on."""
    from tests.gpu.stubs import build_stub

    nccl = build_stub("stub_nccl.c", tmp_path, "libnccl.so", [] if config else ["STUB_NO_CONFIG"])
    result, calls = _job(stub_driver, nccl, tmp_path, "stuck", worker=LIFECYCLE, hosts=[], timeout=40, RING_HIERARCHICAL_ALLREDUCE="0",
                         RING_TIMEOUT_SECONDS="2")
    assert not result.timed_out, result.stdout
    raised = _raised(result.stdout)
    assert sorted(line.split()[1] for line in raised) == ["0", "1"], result.stdout
    assert all("PeerFailureError" in line for line in raised), result.stdout
    assert any("was not created within 2 s" in line for line in raised), result.stdout
    raw = [line.split()[0] for line in (tmp_path / "nccl.log").read_text().splitlines()]
    assert raw.count("ncclCommInitRankConfig" if config else "ncclCommInitRank") == 2, raw


def test_fusion_buffer_grows_without_waiting_for_the_stream(stub_driver, stub_nccl, tmp_path) -> None:
    """Issue 40, item 4: fused batches of growing size (80 KB to 400 KB per tensor). Growing the
    fusion buffer never synchronizes a stream (the old buffer is freed by the finalizer after the
    work that follows it), and its sizes are rounded up: a single allocation serves them all."""
    log = tmp_path / "cuda.log"
    result, calls = _job(stub_driver, stub_nccl, tmp_path, "grow", worker=LIFECYCLE, hosts=[], RING_HIERARCHICAL_ALLREDUCE="0",
                         RING_CYCLE_TIME="20", STUB_CUDA_LOG=str(log))
    assert result.returncode == 0 and "OK 0" in result.stdout and "OK 1" in result.stdout, result.stdout
    assert any(c[0] == "ncclAllReduce" and int(c[1]) > 3 * 20000 for c in calls), calls  # fused
    cuda = log.read_text().splitlines()
    assert not [c for c in cuda if c.startswith("sync ")], [c for c in cuda if c.startswith("sync ")]
    allocs = [int(c.split()[1]) for c in cuda if c.startswith("memalloc ")]
    assert allocs and all(a % (1 << 20) == 0 for a in allocs) and len(allocs) <= 2 * 2, allocs


def test_joined_rank_without_a_cuda_tensor_uses_its_own_gpu(stub_driver, stub_nccl, tmp_path) -> None:
    """Issue 40, item 5: a rank that joined before sending any CUDA tensor joins the communicator on
    its local rank's GPU; on GPU 0, beside rank 0, NCCL refuses the communicator (the stand-in's
    "Duplicate GPU detected")."""
    result, calls = _job(stub_driver, stub_nccl, tmp_path, "join", worker=LIFECYCLE, hosts=[], RING_HIERARCHICAL_ALLREDUCE="0")
    assert result.returncode == 0 and "OK 0" in result.stdout and "OK 1" in result.stdout, result.stdout
    assert "Duplicate GPU" not in result.stdout
    assert [c[0] for c in calls].count("ncclAllReduce") == 2 * 2, calls


def test_work_on_one_stream_completes_while_another_stream_waits(stub_driver, stub_nccl, tmp_path) -> None:
    """Issue 40, item 10: one finalizer thread per stream. With two lanes, lane 0's work never
    finishes; an allreduce on lane 1 completes anyway (one FIFO held it behind lane 0's)."""
    result, _ = _job(stub_driver, stub_nccl, tmp_path, "held", worker=LIFECYCLE, np=1, hosts=[], timeout=30,
                     RING_HIERARCHICAL_ALLREDUCE="0", RING_NUM_NCCL_STREAMS="2")
    assert not result.timed_out and result.returncode == 0 and "OK 0" in result.stdout, result.stdout


@pytest.mark.parametrize("async_completion", ["1", "0"])
def test_dlpack_consumer_stream_waits_for_an_async_result(stub_driver, stub_nccl, tmp_path, async_completion) -> None:
    """Issue 40, item 11: with RING_ENABLE_ASYNC_COMPLETION=1 a GPU result's handle completes before
    the GPU wrote it; __dlpack__(stream=s) makes the consumer's stream s wait for the operation's
    event (stream=-1: no wait). Without async completion the result is written already: no wait."""
    log = tmp_path / "cuda.log"
    result, _ = _job(stub_driver, stub_nccl, tmp_path, "dlpack", worker=LIFECYCLE, np=1, hosts=[], RING_HIERARCHICAL_ALLREDUCE="0",
                     RING_ENABLE_ASYNC_COMPLETION=async_completion, STUB_CUDA_LOG=str(log))
    assert result.returncode == 0 and "OK 0" in result.stdout, result.stdout
    waits = log.read_text().splitlines().count(f"wait {0xDEF0}")
    assert waits == (1 if async_completion == "1" else 0), waits


def test_fused_odd_sized_fp16_tensors_are_copied_in_16_byte_units(stub_driver, stub_nccl, tmp_path) -> None:
    """Issue 40, item 7: fusion entries start at 16-byte boundaries, so after a 3-element fp16
    tensor the batched-copy kernel still copies every later entry 16 bytes at a time."""
    log = tmp_path / "cuda.log"
    result, calls = _job(stub_driver, stub_nccl, tmp_path, "odd", worker=LIFECYCLE, hosts=[], RING_HIERARCHICAL_ALLREDUCE="0",
                         RING_CYCLE_TIME="20", STUB_CUDA_LOG=str(log))
    assert result.returncode == 0 and "OK 0" in result.stdout and "OK 1" in result.stdout, result.stdout
    cuda = log.read_text().splitlines()
    units = [c for c in cuda if c.startswith("unit ")]
    assert any(c.startswith("kernel ") and int(c.split()[1]) > 2 for c in cuda), cuda  # fused
    assert units and set(units) == {"unit 16"}, sorted(set(units))


def test_teardown_after_the_driver_is_gone_does_not_end_the_process(stub_driver, stub_nccl, tmp_path) -> None:
    """Issue 40, item 12: at interpreter exit the driver may already be deinitialized; freeing a GPU
    result (its DLPack deleter), the staging memory and the communicators must not throw from a
    destructor (std::terminate)."""
    result, _ = _job(stub_driver, stub_nccl, tmp_path, "teardown", worker=LIFECYCLE, np=1, hosts=[], RING_HIERARCHICAL_ALLREDUCE="0")
    assert result.returncode == 0 and "OK 0" in result.stdout, result.stdout
    assert "terminate" not in result.stdout, result.stdout


def test_shutdown_aborts_a_communicator_with_an_error_and_destroys_a_healthy_one(stub_driver, stub_nccl,
                                                                               tmp_path) -> None:
    """Issue 40, item 13 (Horovod's commDestroyOrAbort): ncclCommDestroy of a failed communicator
    waits for work that never ends; shutdown aborts it instead."""
    result, calls = _job(stub_driver, stub_nccl, tmp_path, "errored", worker=LIFECYCLE, np=1, hosts=[], RING_HIERARCHICAL_ALLREDUCE="0")
    assert result.returncode == 0 and "OK 0" in result.stdout, result.stdout
    names = [c[0] for c in calls]
    assert names.count("ncclCommAbort") == 1 and "ncclCommDestroy" not in names, calls
    (tmp_path / "healthy").mkdir()
    _, calls = _job(stub_driver, stub_nccl, tmp_path / "healthy", "healthy", worker=LIFECYCLE, np=1, hosts=[],
                    RING_HIERARCHICAL_ALLREDUCE="0")
    names = [c[0] for c in calls]
    assert names.count("ncclCommDestroy") == 1 and "ncclCommAbort" not in names, calls


def test_peer_lost_while_the_engine_waits_for_the_nccl_stage_is_a_peer_failure(stub_driver, stub_nccl,
                                                                              tmp_path) -> None:
    """The hierarchical allreduce's engine-side wait for its NCCL stage looks at the cross-host peers:
    one that vanished is PeerFailureError at once (what elastic training recovers from), not
    RingTimeoutError after RING_TIMEOUT_SECONDS."""
    start = time.monotonic()
    result, _ = _job(stub_driver, stub_nccl, tmp_path, "vanish", worker=LIFECYCLE, timeout=60,
                     RING_TIMEOUT_SECONDS="20")
    raised = _raised(result.stdout)
    assert len(raised) == 1 and raised[0].startswith("RAISED 0 PeerFailureError"), result.stdout
    assert time.monotonic() - start < 15, result.stdout


def test_engine_allocated_gpu_results_come_from_a_pool(stub_driver, stub_nccl, tmp_path) -> None:
    """Issue 40, item 6 (its pool part): five allgathers of one size, each result dropped before the
    next, cost one cuMemAlloc and no cuMemFree (each a device-wide wait on a GPU); each reuse makes
    the engine's stream wait for the block's last consumer's stream."""
    log = tmp_path / "cuda.log"
    result, _ = _job(stub_driver, stub_nccl, tmp_path, "pool", worker=LIFECYCLE, np=1, hosts=[],
                     RING_HIERARCHICAL_ALLREDUCE="0", STUB_CUDA_LOG=str(log))
    assert result.returncode == 0 and "OK 0" in result.stdout, result.stdout
    cuda = log.read_text().splitlines()
    assert [c for c in cuda if c.startswith("memalloc ")] == ["memalloc 4096"], cuda
    assert not [c for c in cuda if c.startswith("memfree ")], cuda
    # One wait per operation for its input's producer, and one per reuse for the last consumer.
    assert len([c for c in cuda if c.startswith("wait ")]) == 5 + 4, cuda


def test_finalizer_failure_fails_the_handle_and_ends_the_job(stub_driver, stub_nccl, tmp_path) -> None:
    result, calls = _job(stub_driver, stub_nccl, tmp_path, "finalizer", np=1, hosts=[], RING_HIERARCHICAL_ALLREDUCE="0")
    raised = _raised(result.stdout)
    assert len(raised) == 2 and all("PeerFailureError" in line for line in raised), result.stdout
    assert "NCCL operation failed: remote process exited" in raised[0], raised
    assert ["ncclBroadcast", "256"] in calls  # bytes
