#include "gpu/device_pool.h"

#include <map>
#include <mutex>
#include <vector>

#include "common/error.h"
#include "gpu/device_streams.h"

namespace ring::gpu {
namespace {

constexpr CUresult kOutOfMemory = 2;  // CUDA_ERROR_OUT_OF_MEMORY

struct FreeBlock {
  CUdeviceptr ptr = 0;
  std::shared_ptr<void> ready;  // fires when its last consumer's work is done (null: at once)
};

struct DevicePool {
  std::map<size_t, std::vector<FreeBlock>> free;  // by class
  size_t cached = 0;                               // bytes in `free`
};

std::mutex g_mu;
std::map<int, DevicePool>& pools() {
  static auto* p = new std::map<int, DevicePool>;  // never destroyed: blocks may come back at exit
  return *p;
}

// Frees every cached block of `pool` (its device current); g_mu held.
void release_cached(DevicePool& pool) {
  for (auto& [size, blocks] : pool.free)
    for (const FreeBlock& b : blocks) cuda_driver().cuMemFree(b.ptr);
  pool.free.clear();
  pool.cached = 0;
}

// Gives `ptr` (a block of class `size`) back; never throws.
void give_back(int device, CUdeviceptr ptr, size_t size, uint64_t consumer) noexcept {
  ScopedDevice current(device, std::nothrow);
  if (!current.ok()) return;  // the driver is gone: nothing to give back to
  std::shared_ptr<void> ready;
  try {
    ready = record_event(device, consumer);
  } catch (const RingError&) {
    return;  // the consumer's stream cannot be asked: the block is never reused (leaked)
  }
  std::lock_guard<std::mutex> lock(g_mu);
  DevicePool& pool = pools()[device];
  if (pool.cached + size > kPoolCachedBytes) {
    cuda_driver().cuMemFree(ptr);  // waits for the device: the rare case
    return;
  }
  pool.free[size].push_back({ptr, std::move(ready)});
  pool.cached += size;
}

}  // namespace

size_t pool_class(size_t bytes) {
  constexpr size_t kMiB = size_t(1) << 20;
  if (bytes > kMiB) return (bytes + kMiB - 1) / kMiB * kMiB;
  size_t size = 4096;
  while (size < bytes) size *= 2;
  return size;
}

std::shared_ptr<void> pool_take(int device, size_t bytes, CUstream stream, uint64_t consumer) {
  const CudaDriver& cu = cuda_driver();
  const size_t size = pool_class(bytes);
  CUdeviceptr ptr = 0;
  std::shared_ptr<void> ready;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    DevicePool& pool = pools()[device];
    auto it = pool.free.find(size);
    if (it != pool.free.end() && !it->second.empty()) {
      ptr = it->second.back().ptr;
      ready = std::move(it->second.back().ready);
      it->second.pop_back();
      pool.cached -= size;
    } else {
      CUresult rc = cu.cuMemAlloc(&ptr, size);
      if (rc == kOutOfMemory) {
        release_cached(pool);
        rc = cu.cuMemAlloc(&ptr, size);
      }
      cuda_check(rc, "cuMemAlloc (a result's GPU memory)");
    }
  }
  std::shared_ptr<void> block(reinterpret_cast<void*>(ptr), [device, size, consumer](void* p) noexcept {
    give_back(device, reinterpret_cast<CUdeviceptr>(p), size, consumer);
  });
  if (ready)  // its last consumer's work first
    cuda_check(cu.cuStreamWaitEvent(stream, static_cast<CUevent>(ready.get()), 0),
               "cuStreamWaitEvent (a pooled block's last consumer)");
  return block;
}

}  // namespace ring::gpu
