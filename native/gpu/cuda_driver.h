// The CUDA driver API, loaded at run time.
//
// The engine builds without CUDA headers, nvcc or a GPU: it declares the
// few driver types and functions it uses here and resolves them with dlopen
// / dlsym from libcuda.so.1 (or RING_CUDA_DRIVER_LIBRARY, a path, for a
// driver installed elsewhere) the first time cuda_driver() is called. A
// machine without the driver gets a CudaDriver whose `error` says why, and
// every GPU path stays off.
//
// Types are the driver's own ABI (cuda.h): opaque handles are pointers,
// CUdeviceptr is a 64-bit integer, CUresult an int. Versioned entry points
// (cuMemAlloc_v2, ...) are resolved by the names cuda.h maps them to.
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>
#include <string>

namespace ring::gpu {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = struct CUctx_st*;
using CUstream = struct CUstream_st*;
using CUevent = struct CUevent_st*;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;

constexpr CUresult CUDA_SUCCESS = 0;
constexpr CUresult CUDA_ERROR_NOT_READY = 600;
constexpr unsigned CU_STREAM_NON_BLOCKING = 0x1;
constexpr unsigned CU_EVENT_DISABLE_TIMING = 0x2;
constexpr unsigned CU_MEMHOSTALLOC_PORTABLE = 0x1;

// Function pointers, each the driver function of the same name. Every call
// is host-side and returns a CUresult; those taking a stream only enqueue
// work on it (they return before the device has done it).
struct CudaDriver {
  bool loaded = false;
  std::string path;   // what was opened
  std::string error;  // why not loaded (empty when loaded)
  int version = 0;    // cuDriverGetVersion: 1000 * major + 10 * minor
  int device_count = 0;

  CUresult (*cuInit)(unsigned) = nullptr;
  CUresult (*cuDriverGetVersion)(int*) = nullptr;
  CUresult (*cuGetErrorString)(CUresult, const char**) = nullptr;
  CUresult (*cuDeviceGetCount)(int*) = nullptr;
  CUresult (*cuDeviceGet)(CUdevice*, int) = nullptr;
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*cuCtxPushCurrent)(CUcontext) = nullptr;
  CUresult (*cuCtxPopCurrent)(CUcontext*) = nullptr;
  CUresult (*cuStreamCreate)(CUstream*, unsigned) = nullptr;
  // Lower numbers are higher priorities; greatest <= least (the current context's range).
  CUresult (*cuCtxGetStreamPriorityRange)(int* least, int* greatest) = nullptr;
  CUresult (*cuStreamCreateWithPriority)(CUstream*, unsigned, int) = nullptr;
  CUresult (*cuStreamSynchronize)(CUstream) = nullptr;
  CUresult (*cuStreamWaitEvent)(CUstream, CUevent, unsigned) = nullptr;
  CUresult (*cuEventCreate)(CUevent*, unsigned) = nullptr;
  CUresult (*cuEventRecord)(CUevent, CUstream) = nullptr;
  CUresult (*cuEventQuery)(CUevent) = nullptr;
  CUresult (*cuEventSynchronize)(CUevent) = nullptr;
  CUresult (*cuEventDestroy)(CUevent) = nullptr;
  CUresult (*cuMemAlloc)(CUdeviceptr*, size_t) = nullptr;
  CUresult (*cuMemFree)(CUdeviceptr) = nullptr;
  CUresult (*cuMemHostAlloc)(void**, size_t, unsigned) = nullptr;
  CUresult (*cuMemFreeHost)(void*) = nullptr;
  // Unified addressing: either side may be host or device memory.
  CUresult (*cuMemcpyAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream) = nullptr;
  CUresult (*cuMemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream) = nullptr;
  // The image is PTX text (NUL-terminated), compiled by the driver.
  CUresult (*cuModuleLoadData)(CUmodule*, const void*) = nullptr;
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*) = nullptr;
  // grid x, y, z; block x, y, z; shared memory bytes; stream; parameters; extra.
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             CUstream, void**, void**) = nullptr;
};

// The process's driver, loaded (or found missing) on the first call, which
// also runs cuInit and counts the devices. Thread-safe; never throws.
const CudaDriver& cuda_driver();

// "error <code> (<the driver's text for it>)", from driver `d` (which may
// be the one being loaded).
std::string cuda_error_text(const CudaDriver& d, CUresult rc);

// Throws RingError(Internal) "<what>: CUDA error <code> (<driver's text>)"
// unless `rc` is CUDA_SUCCESS.
void cuda_check(CUresult rc, const char* what);

// Why GPU `index` cannot be used in this process ("" when it can): no
// driver, no GPU, or no such index.
std::string cuda_refusal(int index);

// Device `index`'s primary context (the one torch, cupy and the CUDA
// runtime use), retained once. Throws BadArgument when there is no such GPU.
CUcontext primary_context(int index);

// Makes device `index`'s primary context (the one torch, cupy and the CUDA
// runtime use) current on this thread for the object's lifetime. The
// driver refuses memory, stream, event and module calls on a thread with
// no current context (CUDA_ERROR_INVALID_CONTEXT): every such call sits
// inside one.
class ScopedDevice {
 public:
  // Throws RingError when the context cannot be made current.
  explicit ScopedDevice(int index);
  // Never throws, for destructors and deleters (at interpreter exit the
  // driver may already be deinitialized): ok() says whether the context
  // is current; when not, the caller skips its driver calls.
  ScopedDevice(int index, std::nothrow_t) noexcept;
  ~ScopedDevice();
  bool ok() const { return pushed_; }
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;

 private:
  bool pushed_ = false;
};

}  // namespace ring::gpu
