// Per GPU, what every GPU backend shares: the engine's own stream and a
// pool of events. Thread-safe; streams and events live for the process.
#pragma once

#include <cstdint>
#include <memory>

#include "gpu/cuda_driver.h"

namespace ring::gpu {

// A new stream of the engine on the current device: non-blocking (it does
// not wait for the legacy default stream) and of the device's greatest
// priority, so that its communication is scheduled ahead of the compute
// kernels (the backward pass) it overlaps. Lives for the process.
CUstream create_engine_stream();

// The engine's stream on GPU `device` (non-blocking: it does not wait for
// the legacy default stream), created on first use. The caller has the
// device current (ScopedDevice).
CUstream engine_stream(int device);

// Records an event on `stream` (a CUstream; 0: the legacy default stream)
// of GPU `device`, from the pool. The returned pointer is the CUevent; its
// last copy returns the event to the pool. Makes the device current itself.
std::shared_ptr<void> record_event(int device, uint64_t stream);

// Makes `stream` (a CUstream, or CU_STREAM_LEGACY = 1, CU_STREAM_PER_THREAD
// = 2, as DLPack's consumers name them) of GPU `device` wait for `event`
// (a CUevent from record_event). Makes the device current itself. Throws
// RingError.
void stream_wait_event(int device, uint64_t stream, const std::shared_ptr<void>& event);

// The one GPU this process's tensors are on: the first CUDA device a
// tensor came from. Throws RingError(BadArgument) for a tensor on another.
void claim_device(int device);
// That GPU, or -1 before the first CUDA tensor.
int claimed_device();
// This rank's own GPU for work with no tensor of its own to say (a joined
// rank's stand-ins): the claimed device, else the local rank's (modulo the
// GPUs this process sees: one per process under CUDA_VISIBLE_DEVICES), as
// torch.cuda.set_device(local_rank) would pick. Never GPU 0 for every rank
// of a host: NCCL refuses two ranks of a communicator on one GPU.
int home_device(int local_rank);

}  // namespace ring::gpu
