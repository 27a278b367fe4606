#!/usr/bin/env bash
# The GPU path on a real GPU, in one run of under 8 minutes: build the
# engine against the machine's own Python, then
#   1. np=1 over NCCL: ops x dtypes, fusion over the threshold (the
#      batched-copy kernel, which must load), stream races;
#      again with RING_ENABLE_ASYNC_COMPLETION=1;
#   2. np=2 on one GPU, host-staged (RING_GPU_OPERATIONS=host): the same
#      checks, a Lightning fit with accelerator="gpu" and SyncBatchNorm, and
#      timings against torch.distributed gloo on CUDA tensors;
#   3. np=2 on one GPU over NCCL (NCCL refuses two ranks on one GPU before
#      2.30: each rank gets its own NCCL_HOSTID, an unsupported setting, for
#      correctness only; 2.30 and later: NCCL_MULTI_RANK_GPU_ENABLE=1),
#      and np=4 as two hosts of two ranks with RING_HIERARCHICAL_ALLREDUCE=1;
#   4. Keras 3 at np=2 on the torch backend (gradients through NCCL) and
#      the JAX backend (jit_compile=True, gradients through the CUDA XLA FFI
#      handler on XLA's stream into NCCL): a fit on the GPU, replicas
#      identical; needs build/gpu-wheels (`make gpu-wheels` here, carried);
#      JAX's own collectives in jax.jit on CUDA arrays at np=2 over NCCL
#      (tests/gpu/workers/jax_gpu_worker.py), with and without async completion,
#      after the handler's logic alone on cupy memory at np=1 and np=2;
#   5. issue 38's sharded optimizer and PowerSGD at np=2 (host-staged, NCCL);
#      issue 40's checks (tests/gpu/workers/issue40_worker.py): the host-staged
#      path from a thread with no CUDA context, fused odd-sized fp16 at full
#      copy width; reported only: a 2 GiB allgather while torch's cache holds
#      the memory, and a small operation's completion time;
#   6. the benchmark at np=1 against raw NCCL (cupy.cuda.nccl) and
#      torch.distributed NCCL: 4 B to 256 MiB, and 200 x 16 KiB.
# Output goes to $OUT (or ./gpu-check-out): check.log (every step's whole
# output), summary.txt and the benchmark's JSON rows; the console gets each
# step's tail. Exit status: 0 when every step passed.
#
# Usage (repo root, on the GPU machine): bash tests/gpu/device_check.sh
# ONLY="name ..." runs only the steps named (the build always runs), e.g. the
# CUDA XLA FFI handler's: ONLY="jax-ffi-built np1-xla-stream np2-xla-stream
# keras-install np2-keras-jax np2-jax-jit np2-jax-jit-async".
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT="${OUT:-$PWD/gpu-check-out}"
mkdir -p "$OUT"
PY="${PYTHON:-python3}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
failed=0

LOG="$OUT/check.log"
: >"$LOG"
step() {  # step NAME TIMEOUT COMMAND...: runs it, appends its output to check.log, records the result
  local name=$1 limit=$2
  shift 2
  if [ -n "${ONLY:-}" ] && [ "$name" != build ] && [[ " $ONLY " != *" $name "* ]]; then
    echo "=== $name: skipped (not in ONLY)" >>"$LOG"
    return 0
  fi
  echo "=== $name: $*" | tee -a "$LOG"
  local start=$SECONDS part="$OUT/.step.log"
  timeout "$limit" "$@" >"$part" 2>&1
  local rc=$?
  cat "$part" >>"$LOG"
  tail -n 25 "$part"
  rm -f "$part"
  echo "=== $name: exit $rc after $((SECONDS - start)) s" | tee -a "$LOG"
  [ $rc -eq 0 ] || failed=1
  return $rc
}

{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  "$PY" -c "import sys, torch, numpy; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'numpy', numpy.__version__)"
  "$PY" -c "import cupy; print('cupy', cupy.__version__)" || true
  nvcc --version | tail -n 2 || true
} 2>&1 | tee -a "$LOG"

step build 300 bash -c "cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DRING_BUILD_PYTHON=ON \
  -DPython_EXECUTABLE=$(command -v "$PY") -Dnanobind_DIR=\"\$($PY -m nanobind --cmake_dir)\" \
  -DCMAKE_LIBRARY_OUTPUT_DIRECTORY=$PWD/ring_strategy && cmake --build build/gpu" || exit 1

"$PY" -c "from ring_strategy.build_queries import gpu_info; import json; print(json.dumps(gpu_info(), indent=1))" \
  | tee -a "$LOG"
if ! "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  echo "device check: FAILED: torch sees no CUDA GPU here; every step needs one" | tee -a "$LOG" "$OUT/summary.txt"
  exit 1
fi
NCCL=$("$PY" -c "from ring_strategy.build_queries import nccl_built; print(nccl_built())")
RUN=("$PY" -m ring_strategy.runner.launch)
WORKER=tests/gpu/workers/device_worker.py

step np1-nccl 120 env RING_FUSION_THRESHOLD=1048576 "${RUN[@]}" -np 1 "$PY" $WORKER ops
step np1-async 120 env RING_ENABLE_ASYNC_COMPLETION=1 "${RUN[@]}" -np 1 "$PY" $WORKER ops
step np2-host 150 env RING_GPU_OPERATIONS=host RING_FUSION_THRESHOLD=1048576 "${RUN[@]}" -np 2 "$PY" $WORKER ops
step np2-lightning 150 env RING_GPU_OPERATIONS=host "${RUN[@]}" -np 2 "$PY" $WORKER lightning
step np2-host-time 90 env RING_GPU_OPERATIONS=host RING_DEVICE_PEER=gloo "${RUN[@]}" -np 2 "$PY" $WORKER time
if [ "$NCCL" -ge 23000 ]; then
  SHARE=(NCCL_MULTI_RANK_GPU_ENABLE=1)
else
  SHARE=(RING_DEVICE_NCCL_HOSTID=1)
fi
step np2-nccl 150 env "${SHARE[@]}" RING_FUSION_THRESHOLD=1048576 "${RUN[@]}" -np 2 "$PY" $WORKER ops
# Two "hosts" (two names of this machine) of two ranks: NCCL inside each, the CPU ring across.
step np4-hierarchical 180 env "${SHARE[@]}" RING_HIERARCHICAL_ALLREDUCE=1 RING_FUSION_THRESHOLD=1048576 \
  "${RUN[@]}" -np 4 -H localhost:2,127.0.0.1:2 "$PY" $WORKER ops

# The CUDA XLA FFI handler's logic (collective_call.h) on cupy memory and a cupy stream as XLA's,
# over NCCL, before JAX calls it (issue 34, item 2).
step np1-xla-stream 90 "${RUN[@]}" -np 1 "$PY" tests/gpu/workers/xla_stream_worker.py cupy
step np2-xla-stream 120 env "${SHARE[@]}" "${RUN[@]}" -np 2 "$PY" tests/gpu/workers/xla_stream_worker.py cupy

# Keras 3 on the GPU, torch and JAX backends (the image has no TensorFlow), from
# the wheels `make gpu-wheels` put in build/gpu-wheels (the image has no Keras).
KERAS_SITE="$PWD/build/gpu-site"
step keras-install 60 bash -c "ls build/gpu-wheels/keras-*.whl && \
  $PY -m pip install -q --no-index --no-deps --target '$KERAS_SITE' build/gpu-wheels/*.whl"
KERAS_ENV=(PYTHONPATH="$KERAS_SITE:$PYTHONPATH" XLA_PYTHON_CLIENT_PREALLOCATE=false)
step np2-keras-torch 150 env "${KERAS_ENV[@]}" "${SHARE[@]}" KERAS_BACKEND=torch \
  "${RUN[@]}" -np 2 "$PY" tests/gpu/workers/keras_gpu_worker.py
# JAX on the GPU through the CUDA XLA FFI handler (issue 34, item 2): built where jaxlib's headers are.
step jax-ffi-built 60 "$PY" -c "from ring_strategy import _native; assert _native.HAS_XLA_FFI, 'no jaxlib headers'"
step np2-keras-jax 150 env "${KERAS_ENV[@]}" "${SHARE[@]}" KERAS_BACKEND=jax \
  "${RUN[@]}" -np 2 "$PY" tests/gpu/workers/keras_gpu_worker.py
step np2-jax-jit 150 env "${KERAS_ENV[@]}" "${SHARE[@]}" "${RUN[@]}" -np 2 "$PY" tests/gpu/workers/jax_gpu_worker.py
step np2-jax-jit-async 150 env "${KERAS_ENV[@]}" "${SHARE[@]}" RING_ENABLE_ASYNC_COMPLETION=1 \
  "${RUN[@]}" -np 2 "$PY" tests/gpu/workers/jax_gpu_worker.py

# Issue 38: the sharded optimizer and PowerSGD on CUDA tensors, host-staged and over NCCL.
step np2-i38-host 150 env RING_GPU_OPERATIONS=host "${RUN[@]}" -np 2 "$PY" tests/gpu/workers/issue38_worker.py
step np2-i38-nccl 150 env "${SHARE[@]}" "${RUN[@]}" -np 2 "$PY" tests/gpu/workers/issue38_worker.py

# Issue 40: what the CPU stand-ins cannot show. Results come from the engine's pool, not torch's
# caching allocator (item 6's better half), and item 10's figure is unmeasured: those two steps
# report without failing the check (known_step).
known_step() {  # known_step NAME TIMEOUT COMMAND...: as step, but a failure is reported, not counted
  local before=$failed
  step "$@" || echo "=== $1: known to fail until its issue-40 item is done" | tee -a "$LOG"
  failed=$before
}
W40=tests/gpu/workers/issue40_worker.py
step i40-engine-thread 120 env RING_GPU_OPERATIONS=host "${RUN[@]}" -np 2 "$PY" $W40 engine-thread
step i40-odd-fp16 120 "${RUN[@]}" -np 1 "$PY" $W40 odd-fp16
known_step i40-big-allgather 120 "${RUN[@]}" -np 1 "$PY" $W40 big-allgather
known_step i40-latency 120 "${RUN[@]}" -np 1 "$PY" $W40 latency

BENCH=("$PY" -m ring_strategy.bench --device cuda --compare nccl,torch-nccl --check)
step bench-sizes 150 "${RUN[@]}" -np 1 "${BENCH[@]}" --sizes 4,4K,1M,64M,256M --json "$OUT/bench_sizes.json"
step bench-small 90 "${RUN[@]}" -np 1 "${BENCH[@]}" --case small-tensors --json "$OUT/bench_small.json"

# The batched-copy kernel (PTX) loaded wherever fused tensors were copied (the
# bracket keeps the pattern from matching this step's own line in the log).
step kernel-loaded 5 bash -c "! grep -n 'batched-copy kernel did not [l]oad' '$LOG'"

echo "device check: $([ $failed -eq 0 ] && echo PASSED || echo FAILED) (NCCL $NCCL)${ONLY:+ (only: $ONLY)}" \
  | tee "$OUT/summary.txt"
exit $failed
