#include "gpu/device_memory.h"

namespace ring::gpu {

std::shared_ptr<void> device_alloc(int device, size_t bytes) {
  CUdeviceptr p = 0;
  cuda_check(cuda_driver().cuMemAlloc(&p, bytes ? bytes : 1), "cuMemAlloc");
  return std::shared_ptr<void>(reinterpret_cast<void*>(p), [device](void* q) {
    ScopedDevice current(device);
    cuda_driver().cuMemFree(reinterpret_cast<CUdeviceptr>(q));
  });
}

CUdeviceptr DeviceBuffer::at(size_t bytes) {
  if (!memory_ || bytes > bytes_) {
    if (memory_) cuda_check(cuda_driver().cuStreamSynchronize(stream_), "cuStreamSynchronize (fusion buffer grows)");
    memory_.reset();  // free first: the old contents are not needed
    memory_ = device_alloc(device_, bytes);
    bytes_ = bytes;
  }
  return reinterpret_cast<CUdeviceptr>(memory_.get());
}

}  // namespace ring::gpu
