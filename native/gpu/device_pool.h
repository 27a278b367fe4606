// A pool of GPU memory for the results the engine allocates (allgather,
// alltoall, reducescatter and allreduce without an output): an operation
// takes a block instead of paying cuMemAlloc, and the result's last owner
// (the front end's tensor, through DLPack) gives it back instead of paying
// cuMemFree, which also waits for the whole device.
//
// Reuse is ordered as torch's caching allocator orders it: a block given
// back is reused only after the work queued until then on its consumer's
// stream (the stream the operation was enqueued from) is done, which an
// event recorded there at give-back marks; the next user's stream waits
// for that event. A consumer that reads a result on another stream keeps
// the tensor alive until that stream is done (as torch's record_stream).
//
// Blocks come in size classes (pool_class()); at most kPoolCachedBytes per device are kept
// free, the rest is freed at once. When cuMemAlloc runs out of memory the
// device's free blocks are freed and it is tried again. The pool lives for
// the process (never destroyed: results may outlive every engine).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "gpu/cuda_driver.h"

namespace ring::gpu {

constexpr size_t kPoolCachedBytes = size_t(4) << 30;

// The bytes a request of `bytes` is served with: powers of two up to 1 MiB
// (at least 4 KiB), whole MiB above (pure).
size_t pool_class(size_t bytes);

// At least `bytes` of GPU memory on `device` (current on this thread),
// usable by work queued on `stream` from now on; given back when the last
// copy of the pointer goes (any thread, never throws), reusable after the
// work queued by then on `consumer` (a CUstream; 0: the legacy default).
// Throws RingError when the device has no memory left.
std::shared_ptr<void> pool_take(int device, size_t bytes, CUstream stream, uint64_t consumer);

}  // namespace ring::gpu
