#include "engine/backends/gpu/gpu_wait.h"

#include <chrono>
#include <thread>

namespace ring::gpu {

namespace {

constexpr ncclResult_t ncclSystemError = 2;
constexpr ncclResult_t ncclRemoteError = 6;

}  // namespace

ErrorKind nccl_error_kind(ncclResult_t rc) {
  return rc == ncclRemoteError || rc == ncclSystemError ? ErrorKind::PeerFailure : ErrorKind::Internal;
}

WorkState poll_work(CUevent event, ncclComm_t comm, GpuFailure* failure) {
  const CudaDriver& cu = cuda_driver();
  const CUresult rc = cu.cuEventQuery(event);
  if (rc == CUDA_SUCCESS) return WorkState::Done;
  if (rc != CUDA_ERROR_NOT_READY) {
    *failure = {ErrorKind::Internal, "GPU operation failed: CUDA " + cuda_error_text(cu, rc)};
    return WorkState::Failed;
  }
  if (!comm) return WorkState::Running;
  const NcclLibrary& nccl = nccl_library();
  ncclResult_t async = ncclSuccess;
  if (nccl.ncclCommGetAsyncError(comm, &async) != ncclSuccess || async == ncclSuccess || async == ncclInProgress)
    return WorkState::Running;
  *failure = {nccl_error_kind(async), std::string("NCCL operation failed: ") + nccl.ncclGetErrorString(async)};
  return WorkState::Failed;
}

void wait_for_work(CUevent event, ncclComm_t comm, double timeout_seconds, const char* what, Mesh* peers) {
  const auto start = std::chrono::steady_clock::now();
  double next_peer_check = kPeerCheckSeconds;
  GpuFailure failure;
  // Spin briefly (most waits end within microseconds), then back off.
  for (int polls = 0;; ++polls) {
    const WorkState state = poll_work(event, comm, &failure);
    if (state == WorkState::Done) return;
    if (state == WorkState::Failed) throw_error(failure.kind, failure.reason + " (" + what + ")");
    const std::chrono::duration<double> waited = std::chrono::steady_clock::now() - start;
    if (peers && waited.count() > next_peer_check) {  // a lost peer is a PeerFailure now, not a Timeout later
      next_peer_check = waited.count() + kPeerCheckSeconds;
      for (int r = 0; r < peers->size(); ++r)
        if (r != peers->rank()) peers->check_alive(r);
    }
    if (waited.count() > timeout_seconds)
      throw_error(ErrorKind::Timeout, std::string(what) + ": the GPU work did not finish within " +
                                          std::to_string(static_cast<int>(timeout_seconds)) +
                                          " s (RING_TIMEOUT_SECONDS); a peer may have stopped");
    if (polls > 1000) std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

}  // namespace ring::gpu
