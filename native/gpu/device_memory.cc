#include "gpu/device_memory.h"

#include <algorithm>

namespace ring::gpu {

std::shared_ptr<void> device_alloc(int device, size_t bytes) {
  CUdeviceptr p = 0;
  cuda_check(cuda_driver().cuMemAlloc(&p, bytes ? bytes : 1), "cuMemAlloc");
  // The deleter runs in destructors (a DLPack capsule's, at interpreter
  // exit too): it never throws, and leaks the memory when the driver is gone.
  return std::shared_ptr<void>(reinterpret_cast<void*>(p), [device](void* q) noexcept {
    ScopedDevice current(device, std::nothrow);
    if (current.ok()) cuda_driver().cuMemFree(reinterpret_cast<CUdeviceptr>(q));
  });
}

size_t fusion_capacity(size_t needed, size_t current) {
  constexpr size_t kGrain = size_t(1) << 20;
  const size_t want = std::max(needed, current + current / 2);
  return (want + kGrain - 1) / kGrain * kGrain;
}

CUdeviceptr DeviceBuffer::at(size_t bytes, std::vector<std::shared_ptr<void>>* retired) {
  if (!memory_ || bytes > bytes_) {
    const size_t grown = fusion_capacity(bytes, bytes_);
    if (memory_) retired->push_back(std::move(memory_));  // freed after the work queued next
    memory_ = device_alloc(device_, grown);
    bytes_ = grown;
  }
  return reinterpret_cast<CUdeviceptr>(memory_.get());
}

PinnedBuffer::~PinnedBuffer() { release(); }

void PinnedBuffer::release() noexcept {
  if (!memory_) return;
  ScopedDevice current(device_, std::nothrow);
  if (current.ok()) cuda_driver().cuMemFreeHost(memory_);
  memory_ = nullptr;
  bytes_ = 0;
}

uint8_t* PinnedBuffer::at(int device, size_t bytes) {
  if (!memory_ || bytes > bytes_) {
    release();
    ScopedDevice current(device);
    cuda_check(cuda_driver().cuMemHostAlloc(&memory_, bytes ? bytes : 1, CU_MEMHOSTALLOC_PORTABLE),
               "cuMemHostAlloc (staging buffer)");
    device_ = device;
    bytes_ = bytes;
  }
  return static_cast<uint8_t*>(memory_);
}

}  // namespace ring::gpu
