#include "gpu/batched_copy.h"

#include <algorithm>
#include <map>
#include <mutex>

#include "common/log.h"

namespace ring::gpu {

extern const char kBatchedCopyPtx[];  // batched_copy.ptx, embedded by the build (batched_copy_ptx.cc)

namespace {

constexpr unsigned kMaxBlocksPerCopy = 32;

// Blocks per copy: one per kBatchedCopyThreads x 16 bytes x 4 units of the
// largest copy, within [1, kMaxBlocksPerCopy].
unsigned blocks_for(size_t largest) {
  const size_t per_block = size_t(kBatchedCopyThreads) * 16 * 4;
  return static_cast<unsigned>(std::clamp<size_t>((largest + per_block - 1) / per_block, 1, kMaxBlocksPerCopy));
}

// The kernel on `device` (its primary context is current), loaded on first
// use; null when the driver cannot load it (logged once per device).
CUfunction kernel_on(int device) {
  static std::mutex mu;
  static std::map<int, CUfunction> loaded;
  std::lock_guard<std::mutex> lock(mu);
  auto it = loaded.find(device);
  if (it != loaded.end()) return it->second;
  const CudaDriver& cu = cuda_driver();
  CUmodule module = nullptr;
  CUfunction fn = nullptr;
  CUresult rc = cu.cuModuleLoadData(&module, kBatchedCopyPtx);
  if (rc == CUDA_SUCCESS) rc = cu.cuModuleGetFunction(&fn, module, "ring_batched_copy");
  if (rc != CUDA_SUCCESS) {
    fn = nullptr;
    log_line(LogLevel::Warning, "GPU " + std::to_string(device) + ": the batched-copy kernel did not load (" +
                                    cuda_error_text(cu, rc) + "); fusion copies go one by one");
  }
  return loaded[device] = fn;
}

}  // namespace

std::vector<CopyLaunch> plan_copies(const std::vector<CopyJob>& jobs, std::vector<CopyJob>* large) {
  std::vector<CopyLaunch> launches;
  for (const CopyJob& j : jobs) {
    if (j.bytes == 0) continue;
    if (j.bytes >= kBatchedCopyMaxBytes) {
      large->push_back(j);
      continue;
    }
    if (launches.empty() || launches.back().args.count == kBatchedCopyCapacity) launches.emplace_back();
    BatchedCopyArgs& a = launches.back().args;
    a.dst[a.count] = j.dst;
    a.src[a.count] = j.src;
    a.bytes[a.count] = j.bytes;
    ++a.count;
  }
  for (CopyLaunch& l : launches)
    l.blocks_per_copy = blocks_for(*std::max_element(l.args.bytes, l.args.bytes + l.args.count));
  return launches;
}

void batched_copy(int device, const std::vector<CopyJob>& jobs, CUstream stream) {
  const CudaDriver& cu = cuda_driver();
  std::vector<CopyJob> one_by_one;
  CUfunction fn = jobs.size() > 1 ? kernel_on(device) : nullptr;
  if (fn) {
    for (CopyLaunch& l : plan_copies(jobs, &one_by_one)) {
      void* params[] = {&l.args};
      cuda_check(cu.cuLaunchKernel(fn, l.blocks_per_copy, l.args.count, 1, kBatchedCopyThreads, 1, 1, 0, stream,
                                   params, nullptr),
                 "the batched-copy kernel");
    }
  } else {
    one_by_one = jobs;
  }
  for (const CopyJob& j : one_by_one)
    if (j.bytes) cuda_check(cu.cuMemcpyAsync(j.dst, j.src, j.bytes, stream), "a fusion buffer copy");
}

}  // namespace ring::gpu
