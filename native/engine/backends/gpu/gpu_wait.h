// Waiting for GPU work without trusting it to finish: the one rule, shared
// by the finalizer (which completes handles) and the engine's own blocking
// waits, for telling work that is done, still running, or failed.
//
// Failed means the event reports a CUDA error, or the NCCL communicator the
// work runs on reports an asynchronous error. NCCL's "remote" and "system"
// errors (a peer's process or connection is gone) are ErrorKind::PeerFailure,
// as a lost peer is on the CPU ring; any other error is Internal.
#pragma once

#include <string>

#include "common/error.h"
#include "gpu/cuda_driver.h"
#include "gpu/nccl.h"
#include "transport/mesh.h"

namespace ring::gpu {

enum class WorkState { Done, Running, Failed };

struct GpuFailure {
  ErrorKind kind = ErrorKind::Internal;
  std::string reason;
};

// One look at work that ends with `event` on a communicator `comm` (null:
// none); the device is current. Fills `failure` when it returns Failed.
WorkState poll_work(CUevent event, ncclComm_t comm, GpuFailure* failure);

// The kind of error an NCCL result code is.
ErrorKind nccl_error_kind(ncclResult_t rc);

// Blocks until `event` fires (the device is current). Throws RingError:
// the failure poll_work() found, PeerFailure when a rank of `peers` (null:
// none) is seen gone meanwhile (looked at every kPeerCheckSeconds), or
// Timeout when the work has not finished after `timeout_seconds` (a peer
// that stopped answering). `what` names the wait in the message.
constexpr double kPeerCheckSeconds = 0.1;
void wait_for_work(CUevent event, ncclComm_t comm, double timeout_seconds, const char* what, Mesh* peers = nullptr);

}  // namespace ring::gpu
