"""One rank of tests/gpu/device_check.sh, on a real GPU: torch CUDA tensors
through ring_strategy.torch, checked against the same operation on CPU
tensors (the CPU ring) in the same process.

Usage: device_worker.py MODE, MODE one of
  ops    every op x dtype, fusion over the threshold, stream races (np >= 1)
  time   timings of allreduce on CUDA tensors against torch.distributed with
         the backend named by RING_DEVICE_PEER (gloo or nccl), in the same run
Prints "OK <rank>" when every check passed; a failed check raises.
"""

from __future__ import annotations

import os
import sys
import time

import torch

import ring_strategy.torch as hvd

DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64, torch.uint8)


def same(gpu: torch.Tensor, cpu: torch.Tensor, what: str) -> None:
    got = gpu.cpu()
    if got.dtype.is_floating_point and got.dtype != torch.float64:
        ok = torch.allclose(got.double(), cpu.double(), rtol=1e-2, atol=1e-2)
    else:
        ok = torch.equal(got, cpu)
    assert ok, f"{what}: GPU {got.flatten()[:8]} vs CPU {cpu.flatten()[:8]}"


def data(dtype: torch.dtype, shape, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=g) * 4).to(dtype)
    return torch.randint(0, 50, shape, generator=g).to(dtype)


def check_ops(dev: torch.device) -> None:
    me, n = hvd.rank(), hvd.size()
    for dtype in DTYPES:
        x = data(dtype, (1000, 3), seed=me)
        name = str(dtype).split(".")[1]
        for op in (hvd.Sum, hvd.Max) + ((hvd.Average,) if dtype.is_floating_point else ()):
            same(hvd.allreduce(x.to(dev), op=op, name=f"ar.{name}.{op}"), hvd.allreduce(x, op=op, name=f"arc.{name}.{op}"),
                 f"allreduce {name} op {op}")
        if dtype.is_floating_point:
            kw = dict(op=hvd.Average, prescale_factor=0.5, postscale_factor=3.0)
            same(hvd.allreduce(x.to(dev), name=f"sc.{name}", **kw), hvd.allreduce(x, name=f"scc.{name}", **kw),
                 f"scaled allreduce {name}")
        same(hvd.broadcast(x.to(dev), root_rank=n - 1, name=f"bc.{name}"), hvd.broadcast(x, n - 1, name=f"bcc.{name}"),
             f"broadcast {name}")
        rows = x[: me + 1]
        same(hvd.allgather(rows.to(dev), name=f"ag.{name}"), hvd.allgather(rows, name=f"agc.{name}"), f"allgather {name}")
        out, splits = hvd.alltoall(x[: 2 * n].to(dev), name=f"a2a.{name}")
        ref, ref_splits = hvd.alltoall(x[: 2 * n], name=f"a2ac.{name}")
        same(out, ref, f"alltoall {name}")
        assert out.device == dev and torch.equal(splits, ref_splits)
        if dtype != torch.uint8:
            same(hvd.reducescatter(x[: 3 * n + 1].to(dev), op=hvd.Sum, name=f"rs.{name}"),
                 hvd.reducescatter(x[: 3 * n + 1], op=hvd.Sum, name=f"rsc.{name}"), f"reducescatter {name}")
    print(f"[{me}] ops x dtypes: OK", flush=True)


def check_fusion(dev: torch.device) -> None:
    """More tensors in flight than one fusion buffer holds (RING_FUSION_THRESHOLD is small here)."""
    xs = [data(torch.float32, (k,), seed=k + hvd.rank()) for k in (1, 7, 1000, 70000, 3, 250000)] * 4
    # Odd byte counts: the batched-copy kernel's 4-byte and 1-byte paths.
    xs += [data(dtype, (k,), seed=k) for dtype in (torch.float16, torch.uint8) for k in (3, 5, 1001, 40001)] * 2
    handles = [hvd.allreduce_async(x.to(dev), op=hvd.Sum, name=f"fuse.{i}") for i, x in enumerate(xs)]
    refs = [hvd.allreduce(x, op=hvd.Sum, name=f"fusec.{i}") for i, x in enumerate(xs)]
    for i, (h, ref) in enumerate(zip(handles, refs)):
        same(hvd.synchronize(h), ref, f"fused {i}")
    print(f"[{hvd.rank()}] fusion over the threshold: OK", flush=True)


def check_streams(dev: torch.device) -> None:
    """A producer on a side stream behind a long kernel; the input dropped right after enqueue;
    the result used on another stream after synchronize, with no host-side sync of the device
    (with RING_ENABLE_ASYNC_COMPLETION=1, after that stream waited for the side stream)."""
    side = torch.cuda.Stream(device=dev)
    expected = float(sum(r + 1 for r in range(hvd.size())))
    for i in range(20):
        with torch.cuda.stream(side):
            torch.cuda._sleep(50_000_000)  # about 25 ms of GPU time before the fill
            x = torch.full((1 << 20,), float(hvd.rank() + 1), device=dev)
            h = hvd.allreduce_async(x, op=hvd.Sum, name=f"race.{i}")
        del x  # the engine keeps what it needs alive
        out = hvd.synchronize(h)
        consumer = torch.cuda.Stream(device=dev)
        if os.environ.get("RING_ENABLE_ASYNC_COMPLETION") == "1":
            consumer.wait_stream(side)  # the result is ready on the enqueuing stream only (docs/gpu.md)
        with torch.cuda.stream(consumer):
            total = (out * 2).sum()
        consumer.synchronize()
        assert float(total) == expected * 2 * (1 << 20), (i, float(total))
    print(f"[{hvd.rank()}] stream races: OK", flush=True)


def check_cupy() -> None:
    """cupy arrays through the core API (ring_strategy.ops), against numpy arrays."""
    import cupy as cp
    import numpy as np

    import ring_strategy as rs

    me = rs.rank()
    for dtype in ("float32", "float64", "int32"):
        x = (np.random.default_rng(me).standard_normal((4 * rs.size(), 5)) * 10).astype(dtype)
        calls = (("allreduce", lambda a, nm: rs.allreduce(a, op=rs.Sum, name=nm)),
                 ("broadcast", lambda a, nm: rs.broadcast(a, 0, name=nm)),
                 ("allgather", lambda a, nm: rs.allgather(a, name=nm)),
                 ("alltoall", lambda a, nm: rs.alltoall(a, name=nm)),
                 ("reducescatter", lambda a, nm: rs.reducescatter(a, op=rs.Sum, name=nm)))
        for label, call in calls:
            got, ref = call(cp.asarray(x), f"cupy.{label}.{dtype}"), call(x, f"numpy.{label}.{dtype}")
            assert isinstance(got, cp.ndarray), (label, type(got))
            np.testing.assert_allclose(cp.asnumpy(got), ref, rtol=1e-5, err_msg=f"{label} {dtype}")
    print(f"[{me}] cupy through the core API: OK", flush=True)


def check_lightning() -> None:
    """Trainer(strategy="ring", accelerator="gpu") under ringrun (devices=1 per process, as with
    Horovod): a few steps of a small model with SyncBatchNorm; every rank ends with the same weights."""
    import lightning.pytorch as pl
    from torch.utils.data import DataLoader, TensorDataset

    import ring_strategy  # noqa: F401  (registers "ring")

    class Net(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.body = torch.nn.Sequential(torch.nn.Linear(8, 16), hvd.SyncBatchNorm(16), torch.nn.ReLU(),
                                            torch.nn.Linear(16, 1))

        def training_step(self, batch, _):
            x, y = batch
            return torch.nn.functional.mse_loss(self.body(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(256, 8, generator=g), torch.randn(256, 1, generator=g))
    torch.manual_seed(0)
    model = Net()
    trainer = pl.Trainer(strategy="ring", accelerator="gpu", devices=1, max_epochs=1, enable_progress_bar=False,
                         enable_checkpointing=False, logger=False, enable_model_summary=False)
    trainer.fit(model, DataLoader(data, batch_size=16))
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    assert flat.is_cuda, flat.device
    every = hvd.allgather(flat.reshape(1, -1), name="lightning.weights")
    assert all(torch.equal(every[0], row) for row in every), "ranks ended with different weights"
    print(f"[{hvd.rank()}] Lightning accelerator='gpu' with SyncBatchNorm: OK", flush=True)


def timings(dev: torch.device) -> None:
    import torch.distributed as dist

    peer = os.environ.get("RING_DEVICE_PEER", "gloo")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    dist.init_process_group(peer, rank=hvd.rank(), world_size=hvd.size())
    for size in (1, 1024, 1 << 18, 1 << 24):
        x = torch.ones(size, device=dev)
        rows = []
        for label, fn in (("ring", lambda: hvd.allreduce_(x, op=hvd.Sum, name=f"t.{size}")),
                          (f"torch {peer}", lambda: dist.all_reduce(x))):
            for _ in range(3):
                fn()
            torch.cuda.synchronize(dev)
            iters = 20 if size < (1 << 24) else 5
            t0 = time.perf_counter()
            for _ in range(iters):
                fn()
            torch.cuda.synchronize(dev)
            rows.append(f"{label} {(time.perf_counter() - t0) / iters * 1e6:.0f} us")
        if hvd.rank() == 0:
            print(f"allreduce {size * 4} B float32 on {dev}: " + ", ".join(rows), flush=True)
    dist.destroy_process_group()


def main() -> None:
    mode = sys.argv[1]
    hvd.init()
    if os.environ.get("RING_DEVICE_NCCL_HOSTID"):  # several ranks on one GPU, NCCL before 2.30
        os.environ["NCCL_HOSTID"] = f"ring-rank-{hvd.rank()}"
    if torch.cuda.device_count() == 0:
        raise SystemExit(f"device_worker: torch {torch.__version__} sees no CUDA GPU "
                         f"(torch.version.cuda={torch.version.cuda}); run this on a GPU machine")
    local = hvd.local_rank() % torch.cuda.device_count()
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    if mode == "ops":
        check_ops(dev)
        check_fusion(dev)
        check_streams(dev)
        check_cupy()
    elif mode == "time":
        timings(dev)
    elif mode == "lightning":
        check_lightning()
    me = hvd.rank()
    hvd.shutdown()
    print(f"OK {me}", flush=True)


if __name__ == "__main__":
    main()
