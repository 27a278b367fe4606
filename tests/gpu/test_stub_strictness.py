"""The CPU stand-ins of the CUDA driver and NCCL (stub_cuda.c, stub_nccl.c) refuse what the real
ones refuse, so the GPU tests can fail where a real GPU would: each rule here, called through ctypes
in a fresh interpreter (the stand-ins keep process-wide state)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

_PRELUDE = """\
import ctypes, os, sys, threading, time
cu = ctypes.CDLL(os.environ["RING_CUDA_DRIVER_LIBRARY"])
nccl = ctypes.CDLL(os.environ["RING_NCCL_LIBRARY"]) if os.environ.get("RING_NCCL_LIBRARY") else None
P = ctypes.c_void_p
assert cu.cuInit(0) == 0
def push(dev):
    ctx = P()
    assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0
    assert cu.cuCtxPushCurrent_v2(ctx) == 0
class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]
"""


def _run(code: str, stub_driver: Path, stub_nccl: Path | None = None, timeout: float = 30,
         **env: str) -> subprocess.CompletedProcess:
    full = dict(os.environ, RING_CUDA_DRIVER_LIBRARY=str(stub_driver), **env)
    if stub_nccl is not None:
        full["RING_NCCL_LIBRARY"] = str(stub_nccl)
    return subprocess.run([sys.executable, "-c", _PRELUDE + code], env=full, capture_output=True, text=True,
                          timeout=timeout)


def test_driver_calls_need_a_current_context(stub_driver) -> None:
    got = _run("""
p, s, e = ctypes.c_ulonglong(), P(), P()
print(cu.cuMemAlloc_v2(ctypes.byref(p), 16), cu.cuMemHostAlloc(ctypes.byref(s), 16, 1),
      cu.cuStreamCreate(ctypes.byref(s), 1), cu.cuEventCreate(ctypes.byref(e), 2), cu.cuCtxPopCurrent_v2(None))
push(0)
print(cu.cuMemAlloc_v2(ctypes.byref(p), 16), cu.cuMemFree_v2(p), cu.cuMemFree_v2(p))
""", stub_driver)
    assert got.stdout.split() == ["201"] * 5 + ["0", "0", "1"], got


def test_event_waited_on_before_it_was_recorded_is_an_error(stub_driver) -> None:
    got = _run("""
push(0)
s, e = P(), P()
cu.cuStreamCreate(ctypes.byref(s), 1); cu.cuEventCreate(ctypes.byref(e), 2)
print(cu.cuStreamWaitEvent(s, e, 0), cu.cuEventQuery(e), cu.cuEventRecord(e, s), cu.cuStreamWaitEvent(s, e, 0))
""", stub_driver)
    assert got.stdout.split() == ["401", "401", "0", "0"], got


def test_driver_after_its_teardown_says_deinitialized(stub_driver) -> None:
    got = _run("push(0)\ncu.stub_cuda_deinitialize()\np = ctypes.c_ulonglong()\n"
               "print(cu.cuMemAlloc_v2(ctypes.byref(p), 16), cu.cuCtxPushCurrent_v2(None))", stub_driver)
    assert got.stdout.split() == ["4", "4"], got


_TWO_RANKS = """
uid = UniqueId()
assert nccl.ncclGetUniqueId(ctypes.byref(uid)) == 0
comms, codes = [P(), P()], [None, None]
def rank(r, dev):
    push(dev)
    codes[r] = nccl.ncclCommInitRank(ctypes.byref(comms[r]), 2, uid, r)
"""


def test_nccl_init_waits_for_every_rank_and_refuses_a_device_twice(stub_driver, stub_nccl) -> None:
    got = _run(_TWO_RANKS + """
t = threading.Thread(target=rank, args=(0, 0), daemon=True); t.start()
time.sleep(1.0)
print("alone", t.is_alive())
rank(1, 1); t.join()
print("both", codes)
uid2 = UniqueId(); nccl.ncclGetUniqueId(ctypes.byref(uid2)); uid = uid2
t = threading.Thread(target=rank, args=(0, 1)); t.start(); rank(1, 1); t.join()
print("same device", codes)
""", stub_driver, stub_nccl, STUB_CUDA_DEVICES="2")
    assert got.stdout.splitlines() == ["alone True", "both [0, 0]", "same device [5, 5]"], got
    assert "Duplicate GPU detected" in got.stderr


def test_nccl_communicator_is_poisoned_after_abort(stub_driver, stub_nccl) -> None:
    got = _run(_TWO_RANKS + """
t = threading.Thread(target=rank, args=(0, 0)); t.start(); rank(1, 1); t.join()
print(nccl.ncclCommAbort(comms[0]), flush=True)
err = ctypes.c_int()
nccl.ncclCommGetAsyncError(comms[0], ctypes.byref(err))
print("not reached")
""", stub_driver, stub_nccl, STUB_CUDA_DEVICES="2")
    assert got.returncode != 0 and got.stdout.split() == ["0"], got
    assert "ncclCommGetAsyncError on a communicator after ncclCommAbort or ncclCommDestroy" in got.stderr


def test_nonblocking_nccl_init_is_in_progress_until_every_rank_came(stub_driver, stub_nccl) -> None:
    got = _run("""
class Config(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("magic", ctypes.c_uint), ("version", ctypes.c_uint),
                ("blocking", ctypes.c_int)]
uid = UniqueId(); nccl.ncclGetUniqueId(ctypes.byref(uid))
cfg = Config(ctypes.sizeof(Config), 0xcafebeef, 21400, 0)
push(0)
c0, c1, state = P(), P(), ctypes.c_int()
print(nccl.ncclCommInitRankConfig(ctypes.byref(c0), 2, uid, 0, ctypes.byref(cfg)))
nccl.ncclCommGetAsyncError(c0, ctypes.byref(state)); print(state.value)
cu.cuCtxPopCurrent_v2(None); push(1)
print(nccl.ncclCommInitRankConfig(ctypes.byref(c1), 2, uid, 1, ctypes.byref(cfg)))
nccl.ncclCommGetAsyncError(c1, ctypes.byref(state)); print(state.value)
nccl.ncclCommGetAsyncError(c0, ctypes.byref(state)); print(state.value)
""", stub_driver, stub_nccl, STUB_CUDA_DEVICES="2")
    assert got.stdout.split() == ["7", "7", "7", "0", "0"], got


def test_nonblocking_nccl_call_must_be_waited_for_before_the_next(stub_driver, stub_nccl) -> None:
    got = _run("""
class Config(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("magic", ctypes.c_uint), ("version", ctypes.c_uint),
                ("blocking", ctypes.c_int)]
uid = UniqueId(); nccl.ncclGetUniqueId(ctypes.byref(uid))
push(0)
c, state = P(), ctypes.c_int()
nccl.ncclCommInitRankConfig(ctypes.byref(c), 1, uid, 0, ctypes.byref(Config(ctypes.sizeof(Config), 0xcafebeef, 21400, 0)))
nccl.ncclCommGetAsyncError(c, ctypes.byref(state))
buf = (ctypes.c_float * 4)()
print(state.value, nccl.ncclAllReduce(buf, buf, 4, 7, 0, c, None), nccl.ncclAllReduce(buf, buf, 4, 7, 0, c, None))
nccl.ncclCommGetAsyncError(c, ctypes.byref(state)); first = state.value
nccl.ncclCommGetAsyncError(c, ctypes.byref(state))
print(first, state.value, nccl.ncclAllReduce(buf, buf, 4, 7, 0, c, None))
""", stub_driver, stub_nccl)
    assert got.stdout.split() == ["0", "7", "5", "7", "0", "7"], got
    assert "while the communicator's last call is still in progress" in got.stderr
