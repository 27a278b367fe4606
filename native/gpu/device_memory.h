// Memory the engine owns for GPU work: fusion buffers that grow, results
// handed to the front end, and pinned host memory for staging.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "gpu/cuda_driver.h"

namespace ring::gpu {

// `bytes` of GPU memory on `device` (cuMemAlloc), freed with the last copy
// of the pointer (on any thread; never throws). The caller has the device
// current.
std::shared_ptr<void> device_alloc(int device, size_t bytes);

// A buffer on one GPU that only grows: at(n, retired) returns at least n
// bytes, the old contents not kept. Only work queued on one stream may use
// it (the stream orders the reuse). Growing never waits: the old memory
// goes to `retired`, for the caller to free once the stream has passed the
// work queued next (GpuWork::keep, freed by the finalizer after the work's
// event), and the new size is rounded up (fusion_capacity) so that a few
// growths reach the working size. The caller has the device current.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(int device) : device_(device) {}
  CUdeviceptr at(size_t bytes, std::vector<std::shared_ptr<void>>* retired);
  size_t capacity() const { return bytes_; }

 private:
  int device_;
  std::shared_ptr<void> memory_;
  size_t bytes_ = 0;
};

// The size a buffer of `current` bytes grows to when `needed` bytes do not
// fit: at least needed and 1.5 x current, rounded up to a multiple of 1 MiB
// (pure).
size_t fusion_capacity(size_t needed, size_t current);

// Pinned (page-locked, portable: any context may copy from it) host memory
// that only grows: at(device, n) returns at least n bytes, the old
// contents not kept. The driver allocates and frees it only with a context
// current: at() makes `device`'s current itself (any thread, the engine's
// included, which has none of its own), and the memory is freed with the
// context of the device it was allocated on. The caller makes sure no copy
// still uses the old memory when it grows (its copies are waited for first).
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer();  // never throws (a driver already gone leaks the memory)
  uint8_t* at(int device, size_t bytes);
  size_t capacity() const { return bytes_; }

 private:
  void release() noexcept;

  void* memory_ = nullptr;
  size_t bytes_ = 0;
  int device_ = 0;  // whose context allocated memory_
};

}  // namespace ring::gpu
