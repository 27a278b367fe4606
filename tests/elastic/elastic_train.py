"""An elastic numpy training loop for the launcher's tests: ``python elastic_train.py [TAG]``.

Least squares on a fixed data set; step ``s`` trains on the global batch
``s`` split ``rank::size``, so any run equals one process training on the
global batches (:func:`reference`) up to rounding. The loop does its own
minimal elastic handling: it commits a copy of its parameters after every
step; on ``HorovodInternalError`` it restores the commit, calls
``_world.reset()`` and takes rank 0's state; at every step it asks rank 0
whether the hosts changed, and if so resets (syncing unless ``skip_sync``).

Settings (environment): ``TRAIN_STEPS`` (default 40), ``TRAIN_SLEEP``
(seconds per step, default 0.05), ``TRAIN_FAIL`` = ``WORKER:STEP:MODE``
(the worker numbered WORKER fails at STEP by MODE: ``sigkill``, ``raise``,
``exit3``, ``stop`` (SIGSTOP while its part of a transfer is running),
``internal`` (raises ``HorovodInternalError`` once, without failing);
WORKER ``all``: every worker). ``TRAIN_DIE_ON_RESET`` = WORKER: that worker
kills itself once it caught an error, while the next world forms. TAG is unused; tests pass a unique
one to find leftover processes. ``TRAIN_PROGRESS``: a file rank 0 rewrites
after every step with ``STEP SIZE`` (for tests that change the hosts midway).

Lines (ringrun prefixes each with ``[worker number]``):
``world G worker N pid P rank R size S at T``, ``synced world G rank R step
K params HEX``, ``caught CLS at T``, ``first step world G at T``, ``victim
worker N pid P failing at T``, ``done worker N rank R steps K params HEX``.
"""

from __future__ import annotations

import os
import signal
import time

import numpy as np

DIM, BATCH, SAMPLES, LR = 8, 12, 96, 0.05


def data():
    """The data set: features and targets, float32."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((SAMPLES, DIM)).astype(np.float32)
    y = (x @ rng.standard_normal(DIM).astype(np.float32) + 0.1 * rng.standard_normal(SAMPLES)).astype(np.float32)
    return x, y


def batch(step: int) -> np.ndarray:
    """The rows of global batch ``step``."""
    return (step * BATCH + np.arange(BATCH)) % SAMPLES


def gradient(w: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The summed least-squares gradient over the rows given."""
    return (x.T @ (x @ w - y)).astype(np.float32)


def reference(steps: int) -> np.ndarray:
    """The parameters after ``steps`` steps of one process on the global batches."""
    x, y = data()
    w = np.zeros(DIM, np.float32)
    for step in range(steps):
        rows = batch(step)
        w = (w - LR * gradient(w, x[rows], y[rows]) / BATCH).astype(np.float32)
    return w


def main() -> None:
    import ring_strategy as rs
    from ring_strategy.elastic import _world
    from ring_strategy.exceptions import HorovodInternalError, HostsUpdatedInterrupt

    steps = int(os.environ.get("TRAIN_STEPS", "40"))
    pause = float(os.environ.get("TRAIN_SLEEP", "0.05"))
    worker = os.environ.get("RING_ELASTIC_WORKER", os.environ.get("RING_RANK", "0"))  # without elastic: the rank
    fail_worker, fail_step, fail_mode = (os.environ.get("TRAIN_FAIL", "") or "none:-1:none").split(":")
    progress = os.environ.get("TRAIN_PROGRESS", "")
    x, y = data()
    state = {"step": 0, "w": np.zeros(DIM, np.float32)}
    committed = dict(step=0, w=state["w"].copy())

    def world() -> int:
        return rs.basics._env().world_generation or 0  # 0: not an elastic job

    def joined() -> None:
        print(f"world {world()} worker {worker} pid {os.getpid()} rank {rs.rank()} "
              f"size {rs.size()} at {time.time():.3f}", flush=True)

    def sync() -> None:
        both = rs.broadcast(np.append(state["w"], np.float32(state["step"])), 0, name="sync")
        state["w"], state["step"] = both[:DIM].copy(), int(both[DIM])
        committed.update(step=state["step"], w=state["w"].copy())
        print(f"synced world {world()} rank {rs.rank()} step {state['step']} "
              f"params {state['w'].tobytes().hex()}", flush=True)

    rs.init()
    joined()
    sync()
    first = False
    while state["step"] < steps:
        try:
            updated, skip = _world.host_updates()
            flags = rs.broadcast(np.array([updated, skip], np.int32), 0, name="hosts")
            if flags[0]:
                raise HostsUpdatedInterrupt(bool(flags[1]))
            if fail_mode == "stop" and state["step"] == int(fail_step):  # a long transfer for the victim to stop in
                ballast = rs.allreduce_async(np.ones(1 << 22, np.float32), name="ballast")
                if fail_worker == worker:
                    time.sleep(0.01)
                else:
                    rs.synchronize(ballast)
            if fail_mode == "internal" and fail_worker in (worker, "all") and state["step"] == int(fail_step):
                fail_mode = "done"  # once: as after a timeout that every rank saw
                raise HorovodInternalError("simulated: every rank timed out")
            if fail_mode in ("sigkill", "stop", "exit3", "raise") and fail_worker in (worker, "all") \
                    and state["step"] == int(fail_step):
                print(f"victim worker {worker} pid {os.getpid()} failing at {time.time():.3f}", flush=True)
                if fail_mode == "sigkill":
                    os.kill(os.getpid(), signal.SIGKILL)
                elif fail_mode == "stop":  # silent in the middle of the transfer below
                    os.kill(os.getpid(), signal.SIGSTOP)
                elif fail_mode == "exit3":
                    os._exit(3)
                raise RuntimeError("the training script failed")
            rows = batch(state["step"])[rs.rank()::rs.size()]
            total = rs.allreduce(gradient(state["w"], x[rows], y[rows]), op=rs.Sum, name="grad")
            state["w"] = (state["w"] - LR * total / BATCH).astype(np.float32)
            state["step"] += 1
            committed.update(step=state["step"], w=state["w"].copy())
            if progress and rs.rank() == 0:
                with open(progress + ".tmp", "w") as f:
                    f.write(f"{state['step']} {rs.size()}\n")
                os.replace(progress + ".tmp", progress)
            if first:
                print(f"first step world {world()} at {time.time():.3f}", flush=True)
                first = False
            time.sleep(pause)
        except HorovodInternalError as e:
            print(f"caught {type(e).__name__} at {time.time():.3f}", flush=True)
            if worker == os.environ.get("TRAIN_DIE_ON_RESET"):
                time.sleep(0.5)  # the driver has placed this worker in the next world by now
                os.kill(os.getpid(), signal.SIGKILL)
            state.update(step=committed["step"], w=committed["w"].copy())
            _world.reset()
            joined()
            sync()
            first = True
        except HostsUpdatedInterrupt as e:
            _world.reset()
            joined()
            if not e.skip_sync:
                sync()
            first = True
    print(f"done worker {worker} rank {rs.rank()} steps {state['step']} params {state['w'].tobytes().hex()}",
          flush=True)
    rs.shutdown()


if __name__ == "__main__":
    main()
