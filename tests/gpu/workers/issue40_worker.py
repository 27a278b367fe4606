"""One rank of tests/gpu/device_check.sh's steps for issue 40, on a real GPU: what the CPU
stand-ins cannot show.

Usage: issue40_worker.py MODE, MODE one of
  engine-thread  (RING_GPU_OPERATIONS=host) host-staged allreduces submitted from a thread
                 that never made a CUDA context current (checked with cuCtxGetCurrent),
                 waited for there: the engine's own thread stages them (item 1)
  big-allgather  (np=1) torch's cache holds all but 1 GiB of the free memory, then a
                 2 GiB allgather: its output must come from torch's cache (item 6)
  odd-fp16       (np=1) fused fp16 allreduces after a 3-element tensor take no longer
                 than the same of whole 16-byte multiples (item 7)
  latency        (np=1) a 4-byte allreduce's completion time, median of 2000 (item 10)
Prints "OK <rank>" when its check passed, and its measurements; a failed check raises.
"""

from __future__ import annotations

import ctypes
import statistics
import sys
import threading
import time

import torch

import ring_strategy.torch as hvd


def current_context() -> int:
    ctx = ctypes.c_void_p()
    ctypes.CDLL("libcuda.so.1").cuCtxGetCurrent(ctypes.byref(ctx))
    return ctx.value or 0


def engine_thread(dev: torch.device) -> None:
    xs = [torch.full((k,), float(hvd.rank() + 1), device=dev) for k in (1, 1000, 1 << 20)]
    torch.cuda.synchronize(dev)
    got = {}

    def submit() -> None:
        got["before"] = current_context()
        handles = [hvd.allreduce_async(x, op=hvd.Sum, name=f"et.{i}") for i, x in enumerate(xs)]
        got["out"] = [hvd.synchronize(h) for h in handles]

    t = threading.Thread(target=submit)
    t.start()
    t.join()
    assert got["before"] == 0, "the submitting thread had a context before it submitted"
    n = hvd.size()
    for x, out in zip(xs, got["out"]):
        assert torch.equal(out, torch.full_like(x, n * (n + 1) / 2)), out.flatten()[:4]


def big_allgather(dev: torch.device) -> None:
    x = torch.ones(1 << 31, dtype=torch.uint8, device=dev)  # 2 GiB
    free, _ = torch.cuda.mem_get_info(dev)
    block = torch.empty(free - (1 << 30), dtype=torch.uint8, device=dev)
    del block  # torch's cache keeps it: cudaMalloc/cuMemAlloc see 1 GiB free
    print(f"reserved by torch {torch.cuda.memory_reserved(dev) >> 20} MiB, free {torch.cuda.mem_get_info(dev)[0] >> 20} MiB",
          flush=True)
    out = hvd.allgather(x, name="big")
    assert out.numel() == x.numel() * hvd.size() and int(out[-1]) == 1


def timed_fusion(dev: torch.device, sizes, label: str) -> float:
    xs = [torch.ones(k, dtype=torch.float16, device=dev) for k in sizes]
    best = float("inf")
    for rep in range(10):
        torch.cuda.synchronize(dev)
        t0 = time.perf_counter()
        handles = [hvd.allreduce_async(x, op=hvd.Sum, name=f"{label}.{i}") for i, x in enumerate(xs)]
        for h in handles:
            hvd.synchronize(h)
        torch.cuda.synchronize(dev)
        best = min(best, time.perf_counter() - t0)
    return best


def odd_fp16(dev: torch.device) -> None:
    even = timed_fusion(dev, [8] + [64 * 1024] * 60, "even")
    odd = timed_fusion(dev, [3] + [64 * 1024 + 1] * 60, "odd")
    print(f"fused fp16: even sizes {even * 1e6:.0f} us, odd sizes {odd * 1e6:.0f} us", flush=True)
    assert odd < even * 1.3, (odd, even)


def latency(dev: torch.device) -> None:
    x = torch.ones(1, device=dev)
    times = []
    for i in range(2200):
        t0 = time.perf_counter()
        hvd.allreduce(x, op=hvd.Sum, name="lat")
        times.append(time.perf_counter() - t0)
    median = statistics.median(times[200:]) * 1e6
    print(f"4-byte allreduce on NCCL, enqueue to completion: median {median:.1f} us", flush=True)
    assert median < 50, median


def main() -> None:
    mode = sys.argv[1]
    hvd.init()
    local = hvd.local_rank() % torch.cuda.device_count()
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    {"engine-thread": engine_thread, "big-allgather": big_allgather, "odd-fp16": odd_fp16,
     "latency": latency}[mode](dev)
    me = hvd.rank()
    hvd.shutdown()
    print(f"OK {me}", flush=True)


if __name__ == "__main__":
    main()
