/* A stand-in for the CUDA driver (libcuda.so.1) for the CPU tests of the
 * engine's GPU code: "device" memory is host memory, streams run their
 * work at once, events are always complete (unless told otherwise). It lets the loader, the build
 * queries and the host-staged backend run for real on a machine without a
 * GPU; it proves nothing about a real GPU (tests/gpu/device_check.sh does).
 *
 * Build: cc -shared -fPIC -o libcuda_stub.so stub_cuda.c [-DSTUB_NO_DEVICE]
 * [-DSTUB_OMIT_MEMCPY]. STUB_CUDA_DEVICES (environment) sets the device
 * count (default 1); STUB_CUDA_EVENTS_PENDING, when set, keeps every event
 * from firing (work that never finishes). STUB_CUDA_LOG, a path: every call that moves memory
 * appends a line there ("memcpy <bytes>", "kernel <copies>", "wait", "record", "sync"), so a
 * test can see what the engine asked of the driver; "record" gives the
 * stream the event was recorded on, "wait" the stream made to wait. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

static void note(const char* what, unsigned long long n) {
  const char* path = getenv("STUB_CUDA_LOG");
  if (!path || !*path) return;
  FILE* f = fopen(path, "a");
  if (!f) return;
  fprintf(f, "%s %llu\n", what, n);
  fclose(f);
}

static int stub_context[16];
static int stub_object;

CUresult cuInit(unsigned flags) {
  (void)flags;
#ifdef STUB_NO_DEVICE
  return 100; /* CUDA_ERROR_NO_DEVICE */
#else
  return 0;
#endif
}
CUresult cuDriverGetVersion(int* v) { *v = 12040; return 0; }
CUresult cuGetErrorString(CUresult rc, const char** text) {
  *text = rc == 100 ? "no CUDA-capable device is detected" : "stub error";
  return 0;
}
CUresult cuDeviceGetCount(int* n) {
  const char* env = getenv("STUB_CUDA_DEVICES");
  *n = env ? atoi(env) : 1;
  return 0;
}
CUresult cuDeviceGet(int* dev, int ordinal) { *dev = ordinal; return 0; }
CUresult cuDevicePrimaryCtxRetain(void** ctx, int dev) { *ctx = &stub_context[dev & 15]; return 0; }
CUresult cuCtxPushCurrent_v2(void* ctx) { (void)ctx; return 0; }
CUresult cuCtxPopCurrent_v2(void** ctx) { if (ctx) *ctx = 0; return 0; }
CUresult cuStreamCreate(void** s, unsigned flags) { (void)flags; *s = &stub_object; return 0; }
CUresult cuStreamSynchronize(void* s) { (void)s; note("sync", 0); return 0; }
CUresult cuStreamWaitEvent(void* s, void* e, unsigned f) { (void)e; (void)f; note("wait", (unsigned long long)s); return 0; }
CUresult cuEventCreate(void** e, unsigned flags) { (void)flags; *e = malloc(1); return 0; }
CUresult cuEventRecord(void* e, void* s) { (void)e; note("record", (unsigned long long)s); return 0; }
/* STUB_CUDA_EVENTS_PENDING set: no event ever fires (GPU work that hangs). */
CUresult cuEventQuery(void* e) { (void)e; return getenv("STUB_CUDA_EVENTS_PENDING") ? 600 : 0; }
CUresult cuEventSynchronize(void* e) { (void)e; return 0; }
CUresult cuEventDestroy_v2(void* e) { free(e); return 0; }
CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t n) { *p = (CUdeviceptr)malloc(n ? n : 1); return 0; }
CUresult cuMemFree_v2(CUdeviceptr p) { free((void*)p); return 0; }
CUresult cuMemHostAlloc(void** p, size_t n, unsigned flags) { (void)flags; *p = malloc(n ? n : 1); return 0; }
CUresult cuMemFreeHost(void* p) { free(p); return 0; }
#ifndef STUB_OMIT_MEMCPY
CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, void* s) {
  (void)s;
  note("memcpy", n);
  memmove((void*)dst, (const void*)src, n);
  return 0;
}
#endif
CUresult cuMemsetD8Async(CUdeviceptr p, unsigned char v, size_t n, void* s) {
  (void)s;
  memset((void*)p, v, n);
  return 0;
}

/* The batched-copy kernel (native/gpu/batched_copy.ptx) as its contract
 * says: block row y copies entry y of the parameter (count, then dst, src
 * and bytes arrays of 64), rows >= count do nothing. Logs "kernel <count>".
 * STUB_CUDA_NO_MODULES set: the driver refuses to load any image. */
static int stub_module, stub_function;
CUresult cuModuleLoadData(void** module, const void* image) {
  if (getenv("STUB_CUDA_NO_MODULES") || !strstr((const char*)image, ".entry ring_batched_copy")) return 200;
  *module = &stub_module;
  return 0;
}
CUresult cuModuleGetFunction(void** fn, void* module, const char* name) {
  if (module != &stub_module || strcmp(name, "ring_batched_copy") != 0) return 500; /* CUDA_ERROR_NOT_FOUND */
  *fn = &stub_function;
  return 0;
}
CUresult cuLaunchKernel(void* fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared, void* stream, void** params, void** extra) {
  (void)gz; (void)bx; (void)by; (void)bz; (void)shared; (void)stream; (void)extra;
  if (fn != &stub_function || gx == 0) return 1; /* CUDA_ERROR_INVALID_VALUE */
  const unsigned char* args = (const unsigned char*)params[0];
  unsigned count;
  memcpy(&count, args, 4);
  note("kernel", count);
  for (unsigned y = 0; y < gy && y < count; ++y) {
    unsigned long long dst, src, bytes;
    memcpy(&dst, args + 8 + 8 * y, 8);
    memcpy(&src, args + 520 + 8 * y, 8);
    memcpy(&bytes, args + 1032 + 8 * y, 8);
    memmove((void*)dst, (const void*)src, bytes);
  }
  return 0;
}
