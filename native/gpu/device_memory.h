// GPU memory the engine owns: fusion buffers that grow, and results handed
// to the front end.
#pragma once

#include <cstddef>
#include <memory>

#include "gpu/cuda_driver.h"

namespace ring::gpu {

// `bytes` of GPU memory on `device` (cuMemAlloc), freed with the last copy
// of the pointer (on any thread). The caller has the device current.
std::shared_ptr<void> device_alloc(int device, size_t bytes);

// A buffer on one GPU that only grows: at(n) returns at least n bytes, the
// old contents not kept. Only work queued on `stream` may use it (the
// stream orders the reuse); growing waits for that work first.
class DeviceBuffer {
 public:
  DeviceBuffer(int device, CUstream stream) : device_(device), stream_(stream) {}
  CUdeviceptr at(size_t bytes);

 private:
  int device_;
  CUstream stream_;
  std::shared_ptr<void> memory_;
  size_t bytes_ = 0;
};

}  // namespace ring::gpu
