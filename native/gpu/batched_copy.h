// Batched device-to-device copies: the fusion buffer's copies in and out
// as a few launches of one kernel (batched_copy.ptx) instead of one
// cuMemcpyAsync per tensor, whose launch cost dominates small tensors.
//
// The kernel is PTX, compiled by the driver when first loaded on a device,
// so the engine needs no CUDA compiler to build. Where the driver cannot
// load it, or for copies of kBatchedCopyMaxBytes or more (where a copy
// engine is as fast and launches are few), cuMemcpyAsync does the copy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "gpu/cuda_driver.h"

namespace ring::gpu {

// The kernel's parameter, by value; its layout is the one batched_copy.ptx
// reads (count at 0, then dst, src and bytes arrays at 8, 520 and 1032).
constexpr uint32_t kBatchedCopyCapacity = 64;
struct BatchedCopyArgs {
  uint32_t count = 0;
  uint64_t dst[kBatchedCopyCapacity] = {};
  uint64_t src[kBatchedCopyCapacity] = {};
  uint64_t bytes[kBatchedCopyCapacity] = {};
};
static_assert(sizeof(BatchedCopyArgs) == 1544, "batched_copy.ptx reads this layout");

constexpr size_t kBatchedCopyMaxBytes = size_t(1) << 20;

// Fusion buffer layout: each entry starts at a multiple of 16 bytes (as
// Horovod pads), so the kernel copies every entry in 16-byte units however
// odd the entries before it (an odd-sized fp16 tensor would leave every
// later one 2-byte aligned, copied byte by byte). The bytes an entry of
// `bytes` takes, its padding included (pure).
constexpr size_t kFusionAlign = 16;
constexpr size_t fusion_padded(size_t bytes) { return (bytes + kFusionAlign - 1) / kFusionAlign * kFusionAlign; }

struct CopyJob {
  CUdeviceptr dst = 0;
  CUdeviceptr src = 0;
  size_t bytes = 0;
};

// One launch of the kernel: its parameter and the grid's x dimension
// (blocks per copy; y is args.count).
struct CopyLaunch {
  BatchedCopyArgs args;
  unsigned blocks_per_copy = 1;
};

constexpr unsigned kBatchedCopyThreads = 256;

// The launches for the jobs under kBatchedCopyMaxBytes (empty ones
// skipped), in order, at most kBatchedCopyCapacity copies each; the jobs
// of kBatchedCopyMaxBytes or more go to `large`. Pure.
std::vector<CopyLaunch> plan_copies(const std::vector<CopyJob>& jobs, std::vector<CopyJob>* large);

// Queues every job on `stream` of GPU `device` (current on this thread):
// the kernel for the small ones when the driver loaded it on this device,
// cuMemcpyAsync otherwise. Throws RingError when the driver refuses a
// launch or copy. Thread-safe.
void batched_copy(int device, const std::vector<CopyJob>& jobs, CUstream stream);

}  // namespace ring::gpu
