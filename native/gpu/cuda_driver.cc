#include "gpu/cuda_driver.h"

#include <cstdlib>
#include <map>
#include <mutex>

#include "common/error.h"
#include "gpu/shared_library.h"

namespace ring::gpu {
namespace {

void resolve_all(SharedLibrary& lib, CudaDriver& d) {
  lib.resolve(d.cuInit, "cuInit");
  lib.resolve(d.cuDriverGetVersion, "cuDriverGetVersion");
  lib.resolve(d.cuGetErrorString, "cuGetErrorString");
  lib.resolve(d.cuDeviceGetCount, "cuDeviceGetCount");
  lib.resolve(d.cuDeviceGet, "cuDeviceGet");
  lib.resolve(d.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
  lib.resolve(d.cuCtxPushCurrent, "cuCtxPushCurrent_v2");
  lib.resolve(d.cuCtxPopCurrent, "cuCtxPopCurrent_v2");
  lib.resolve(d.cuStreamCreate, "cuStreamCreate");
  lib.resolve(d.cuCtxGetStreamPriorityRange, "cuCtxGetStreamPriorityRange");
  lib.resolve(d.cuStreamCreateWithPriority, "cuStreamCreateWithPriority");
  lib.resolve(d.cuStreamSynchronize, "cuStreamSynchronize");
  lib.resolve(d.cuStreamWaitEvent, "cuStreamWaitEvent");
  lib.resolve(d.cuEventCreate, "cuEventCreate");
  lib.resolve(d.cuEventRecord, "cuEventRecord");
  lib.resolve(d.cuEventQuery, "cuEventQuery");
  lib.resolve(d.cuEventSynchronize, "cuEventSynchronize");
  lib.resolve(d.cuEventDestroy, "cuEventDestroy_v2");
  lib.resolve(d.cuMemAlloc, "cuMemAlloc_v2");
  lib.resolve(d.cuMemFree, "cuMemFree_v2");
  lib.resolve(d.cuMemHostAlloc, "cuMemHostAlloc");
  lib.resolve(d.cuMemFreeHost, "cuMemFreeHost");
  lib.resolve(d.cuMemcpyAsync, "cuMemcpyAsync");
  lib.resolve(d.cuMemsetD8Async, "cuMemsetD8Async");
  lib.resolve(d.cuModuleLoadData, "cuModuleLoadData");
  lib.resolve(d.cuModuleGetFunction, "cuModuleGetFunction");
  lib.resolve(d.cuLaunchKernel, "cuLaunchKernel");
}

CudaDriver load() {
  CudaDriver d;
  const char* override_path = std::getenv("RING_CUDA_DRIVER_LIBRARY");
  const std::string path = override_path && *override_path ? override_path : "libcuda.so.1";
  const std::string origin = override_path && *override_path ? "RING_CUDA_DRIVER_LIBRARY=" + path : path;
  SharedLibrary lib(path);
  if (!lib.ok()) {
    d.error = "the CUDA driver (" + origin + ") cannot be loaded: " + lib.error();
    return d;
  }
  d.path = lib.file();
  resolve_all(lib, d);
  if (!lib.missing().empty()) {
    d = CudaDriver{};
    d.error = "the CUDA driver " + lib.file() + " lacks " + lib.missing_text();
    return d;
  }
  CUresult rc = d.cuInit(0);
  if (rc == CUDA_SUCCESS) rc = d.cuDriverGetVersion(&d.version);
  if (rc == CUDA_SUCCESS) rc = d.cuDeviceGetCount(&d.device_count);
  if (rc != CUDA_SUCCESS) {
    d.error = "the CUDA driver " + d.path + " found no usable GPU: " + cuda_error_text(d, rc);
    d.device_count = 0;
  }
  d.loaded = true;
  lib.release();
  return d;
}

}  // namespace

const CudaDriver& cuda_driver() {
  static const CudaDriver driver = load();
  return driver;
}

std::string cuda_error_text(const CudaDriver& d, CUresult rc) {
  const char* text = nullptr;
  if (d.cuGetErrorString) d.cuGetErrorString(rc, &text);
  return "error " + std::to_string(rc) + (text ? std::string(" (") + text + ")" : std::string());
}

void cuda_check(CUresult rc, const char* what) {
  if (rc == CUDA_SUCCESS) return;
  throw_error(ErrorKind::Internal, std::string(what) + ": CUDA " + cuda_error_text(cuda_driver(), rc));
}

std::string cuda_refusal(int index) {
  const CudaDriver& d = cuda_driver();
  if (!d.loaded || d.device_count == 0) return d.error.empty() ? "no GPU" : d.error;
  if (index < 0 || index >= d.device_count)
    return "cuda:" + std::to_string(index) + " does not exist: this process sees " + std::to_string(d.device_count) +
           " GPU(s)";
  return "";
}

// Device `index`'s primary context, retained once for the process.
CUcontext primary_context(int index) {
  static std::mutex mu;
  static std::map<int, CUcontext> contexts;
  const CudaDriver& d = cuda_driver();
  const std::string why = cuda_refusal(index);
  if (!why.empty()) throw_error(ErrorKind::BadArgument, why);
  std::lock_guard<std::mutex> lock(mu);
  auto it = contexts.find(index);
  if (it != contexts.end()) return it->second;
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  cuda_check(d.cuDeviceGet(&dev, index), "cuDeviceGet");
  cuda_check(d.cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  contexts[index] = ctx;
  return ctx;
}

ScopedDevice::ScopedDevice(int index) {
  cuda_check(cuda_driver().cuCtxPushCurrent(primary_context(index)), "cuCtxPushCurrent");
  pushed_ = true;
}

ScopedDevice::ScopedDevice(int index, std::nothrow_t) noexcept {
  try {
    pushed_ = cuda_driver().cuCtxPushCurrent(primary_context(index)) == CUDA_SUCCESS;
  } catch (...) {  // no driver, no such device, or the driver is gone
    pushed_ = false;
  }
}

ScopedDevice::~ScopedDevice() {
  CUcontext ctx = nullptr;
  if (pushed_) cuda_driver().cuCtxPopCurrent(&ctx);
}

}  // namespace ring::gpu
