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
