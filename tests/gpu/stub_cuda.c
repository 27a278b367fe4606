/* A stand-in for the CUDA driver (libcuda.so.1) for the CPU tests of the
 * engine's GPU code: "device" memory is host memory, streams run their
 * work at once, events fire when recorded (unless told otherwise). It lets
 * the loader, the build queries and the GPU backends run for real on a
 * machine without a GPU; it proves nothing about a real GPU
 * (tests/gpu/device_check.sh does).
 *
 * As strict as the real driver where the engine could get it wrong:
 *  - cuInit first, else CUDA_ERROR_NOT_INITIALIZED (3);
 *  - a current context (cuCtxPushCurrent, per thread) for every memory,
 *    stream, event and module call, else CUDA_ERROR_INVALID_CONTEXT (201);
 *    popping with none current is 201 too;
 *  - an event waited on (cuStreamWaitEvent) or synchronized before it was
 *    ever recorded is CUDA_ERROR_ILLEGAL_STATE (401) (the real driver
 *    treats it as complete, which hides an ordering bug), as is freeing
 *    memory it did not hand out (CUDA_ERROR_INVALID_VALUE, 1);
 *  - after stub_cuda_deinitialize() (the driver's own teardown at process
 *    exit) every call returns CUDA_ERROR_DEINITIALIZED (4).
 *
 * Build: cc -shared -fPIC -o libcuda_stub.so stub_cuda.c [-DSTUB_NO_DEVICE]
 * [-DSTUB_OMIT_MEMCPY]. Environment, read at each call: STUB_CUDA_DEVICES
 * sets the device count (default 1); STUB_CUDA_EVENTS_PENDING, when set,
 * keeps every event from firing (work that never finishes);
 * STUB_CUDA_HOLD_STREAM=k those recorded on the k-th stream created (1: the
 * first) from then on;
 * STUB_CUDA_NO_MODULES refuses every module image. STUB_CUDA_LOG, a path:
 * calls append a line there, so a test can see what the engine asked of the
 * driver: "memcpy <bytes>", "kernel <copies>" and per copy "unit <bytes>"
 * (the batched-copy kernel's copy width), "wait <stream>" (the stream made
 * to wait), "record <stream>", "sync <stream>", "stream <priority>" (a
 * stream created), "memalloc <bytes>", "memfree <bytes>". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

enum {
  OK = 0, INVALID_VALUE = 1, NOT_INITIALIZED = 3, DEINITIALIZED = 4, INVALID_CONTEXT = 201,
  ILLEGAL_STATE = 401, NOT_READY = 600
};
#define MAX_DEVICES 16
#define STACK_DEPTH 32
#define LEAST_PRIORITY 0
#define GREATEST_PRIORITY (-5)

static void note(const char* what, unsigned long long n) {
  const char* path = getenv("STUB_CUDA_LOG");
  if (!path || !*path) return;
  FILE* f = fopen(path, "a");
  if (!f) return;
  fprintf(f, "%s %llu\n", what, n);
  fclose(f);
}

static void note_signed(const char* what, long long n) {
  const char* path = getenv("STUB_CUDA_LOG");
  if (!path || !*path) return;
  FILE* f = fopen(path, "a");
  if (!f) return;
  fprintf(f, "%s %lld\n", what, n);
  fclose(f);
}

static int initialized, deinitialized;
static int stub_context[MAX_DEVICES]; /* a primary context: the address of its device's slot */
static __thread int* ctx_stack[STACK_DEPTH];
static __thread int ctx_depth;

/* The driver's own teardown (it runs at process exit): every later call fails. */
void stub_cuda_deinitialize(void) { deinitialized = 1; }

/* 0 when the driver may be called at all. */
static CUresult live(void) {
  if (deinitialized) return DEINITIALIZED;
  return initialized ? OK : NOT_INITIALIZED;
}
/* 0 when a context is current on this thread. */
static CUresult current(void) {
  CUresult rc = live();
  if (rc) return rc;
  return ctx_depth > 0 ? OK : INVALID_CONTEXT;
}

static int device_count(void) {
  const char* env = getenv("STUB_CUDA_DEVICES");
  int n = env ? atoi(env) : 1;
  return n < 0 ? 0 : n > MAX_DEVICES ? MAX_DEVICES : n;
}

CUresult cuInit(unsigned flags) {
  (void)flags;
#ifdef STUB_NO_DEVICE
  return 100; /* CUDA_ERROR_NO_DEVICE */
#else
  initialized = 1;
  return deinitialized ? DEINITIALIZED : OK;
#endif
}
CUresult cuDriverGetVersion(int* v) { *v = 12040; return 0; }
CUresult cuGetErrorString(CUresult rc, const char** text) {
  switch (rc) {
    case 100: *text = "no CUDA-capable device is detected"; break;
    case INVALID_CONTEXT: *text = "invalid device context"; break;
    case DEINITIALIZED: *text = "driver shutting down"; break;
    case NOT_INITIALIZED: *text = "initialization error"; break;
    case ILLEGAL_STATE: *text = "stub: an event waited on before it was recorded"; break;
    default: *text = "stub error";
  }
  return 0;
}
CUresult cuDeviceGetCount(int* n) {
  CUresult rc = live();
  if (rc) return rc;
  *n = device_count();
  return 0;
}
CUresult cuDeviceGet(int* dev, int ordinal) {
  CUresult rc = live();
  if (rc) return rc;
  if (ordinal < 0 || ordinal >= device_count()) return 101; /* CUDA_ERROR_INVALID_DEVICE */
  *dev = ordinal;
  return 0;
}
CUresult cuDevicePrimaryCtxRetain(void** ctx, int dev) {
  CUresult rc = live();
  if (rc) return rc;
  if (dev < 0 || dev >= device_count()) return 101;
  *ctx = &stub_context[dev];
  return 0;
}
CUresult cuCtxPushCurrent_v2(void* ctx) {
  CUresult rc = live();
  if (rc) return rc;
  int* c = ctx;
  if (c < stub_context || c >= stub_context + MAX_DEVICES) return INVALID_CONTEXT;
  if (ctx_depth == STACK_DEPTH) return 2; /* CUDA_ERROR_OUT_OF_MEMORY */
  ctx_stack[ctx_depth++] = c;
  return 0;
}
CUresult cuCtxPopCurrent_v2(void** ctx) {
  CUresult rc = current();
  if (rc) return rc;
  --ctx_depth;
  if (ctx) *ctx = ctx_stack[ctx_depth];
  return 0;
}
/* The device of the current context (NCCL's stand-in asks it, as NCCL asks the runtime). */
CUresult cuCtxGetDevice(int* dev) {
  CUresult rc = current();
  if (rc) return rc;
  *dev = (int)(ctx_stack[ctx_depth - 1] - stub_context);
  return 0;
}
CUresult cuCtxGetStreamPriorityRange(int* least, int* greatest) {
  CUresult rc = current();
  if (rc) return rc;
  if (least) *least = LEAST_PRIORITY;
  if (greatest) *greatest = GREATEST_PRIORITY;
  return 0;
}

/* Streams: distinct objects (the engine's own streams can be told apart in the log). */
typedef struct {
  int device, priority, index; /* index: 1 for the first stream created, 2 for the next... */
} Stream;
static int streams_created;
static void* stream_table[256]; /* the first streams created, by index - 1 */
/* The index of stream `s` when this stand-in created it (not a caller's made-up handle), else 0. */
static int stream_index(void* s) {
  for (int i = 0; i < streams_created && i < 256; ++i)
    if (stream_table[i] == s) return i + 1;
  return 0;
}
CUresult cuStreamCreateWithPriority(void** s, unsigned flags, int priority) {
  (void)flags;
  CUresult rc = current();
  if (rc) return rc;
  Stream* st = malloc(sizeof(Stream));
  st->device = (int)(ctx_stack[ctx_depth - 1] - stub_context);
  st->index = __atomic_add_fetch(&streams_created, 1, __ATOMIC_RELAXED);
  if (st->index <= 256) stream_table[st->index - 1] = st;
  st->priority = priority < GREATEST_PRIORITY ? GREATEST_PRIORITY : priority > LEAST_PRIORITY ? LEAST_PRIORITY : priority;
  note_signed("stream", st->priority);
  *s = st;
  return 0;
}
CUresult cuStreamCreate(void** s, unsigned flags) { return cuStreamCreateWithPriority(s, flags, LEAST_PRIORITY); }
CUresult cuStreamSynchronize(void* s) {
  CUresult rc = current();
  if (rc) return rc;
  note("sync", (unsigned long long)s);
  return 0;
}

/* Events: recorded or not. */
#define EVENT_MAGIC 0x5e7e47u
typedef struct {
  unsigned magic;
  int recorded;
  int held; /* recorded on the stream STUB_CUDA_HOLD_STREAM names: never fires */
} Event;
static CUresult event_of(void* e, Event** out) {
  CUresult rc = current();
  if (rc) return rc;
  if (!e || ((Event*)e)->magic != EVENT_MAGIC) return 400; /* CUDA_ERROR_INVALID_HANDLE */
  *out = e;
  return 0;
}
CUresult cuStreamWaitEvent(void* s, void* e, unsigned f) {
  (void)f;
  Event* ev;
  CUresult rc = event_of(e, &ev);
  if (rc) return rc;
  if (!ev->recorded) return ILLEGAL_STATE;
  note("wait", (unsigned long long)s);
  return 0;
}
CUresult cuEventCreate(void** e, unsigned flags) {
  (void)flags;
  CUresult rc = current();
  if (rc) return rc;
  Event* ev = calloc(1, sizeof(Event));
  ev->magic = EVENT_MAGIC;
  *e = ev;
  return 0;
}
CUresult cuEventRecord(void* e, void* s) {
  Event* ev;
  CUresult rc = event_of(e, &ev);
  if (rc) return rc;
  ev->recorded = 1;
  const char* hold = getenv("STUB_CUDA_HOLD_STREAM");
  ev->held = hold && atoi(hold) > 0 && stream_index(s) == atoi(hold);
  note("record", (unsigned long long)s);
  return 0;
}
/* STUB_CUDA_EVENTS_PENDING set: no event ever fires (GPU work that hangs). */
CUresult cuEventQuery(void* e) {
  Event* ev;
  CUresult rc = event_of(e, &ev);
  if (rc) return rc;
  if (!ev->recorded) return ILLEGAL_STATE;
  return getenv("STUB_CUDA_EVENTS_PENDING") || ev->held ? NOT_READY : OK;
}
CUresult cuEventSynchronize(void* e) {
  Event* ev;
  CUresult rc = event_of(e, &ev);
  if (rc) return rc;
  return ev->recorded ? OK : ILLEGAL_STATE;
}
CUresult cuEventDestroy_v2(void* e) {
  Event* ev;
  CUresult rc = event_of(e, &ev);
  if (rc) return rc;
  ev->magic = 0;
  free(ev);
  return 0;
}

/* Memory: a header before each block says what it is and how big. */
typedef struct {
  unsigned long long magic, bytes, pad[2];
} Block;
#define DEV_MAGIC 0xde71ceull
#define HOST_MAGIC 0x40570ull
static void* block_alloc(size_t n, unsigned long long magic) {
  Block* b = malloc(sizeof(Block) + (n ? n : 1));
  b->magic = magic;
  b->bytes = n;
  return b + 1;
}
static CUresult block_free(void* p, unsigned long long magic) {
  if (!p) return INVALID_VALUE;
  Block* b = (Block*)p - 1;
  if (b->magic != magic) return INVALID_VALUE;
  b->magic = 0;
  free(b);
  return 0;
}
CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t n) {
  CUresult rc = current();
  if (rc) return rc;
  note("memalloc", n);
  *p = (CUdeviceptr)block_alloc(n, DEV_MAGIC);
  return 0;
}
CUresult cuMemFree_v2(CUdeviceptr p) {
  CUresult rc = current();
  if (rc) return rc;
  if (p) note("memfree", ((Block*)p - 1)->bytes);
  return block_free((void*)p, DEV_MAGIC);
}
CUresult cuMemHostAlloc(void** p, size_t n, unsigned flags) {
  (void)flags;
  CUresult rc = current();
  if (rc) return rc;
  *p = block_alloc(n, HOST_MAGIC);
  return 0;
}
CUresult cuMemFreeHost(void* p) {
  CUresult rc = current();
  if (rc) return rc;
  return block_free(p, HOST_MAGIC);
}
#ifndef STUB_OMIT_MEMCPY
CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, void* s) {
  (void)s;
  CUresult rc = current();
  if (rc) return rc;
  note("memcpy", n);
  memmove((void*)dst, (const void*)src, n);
  return 0;
}
#endif
CUresult cuMemsetD8Async(CUdeviceptr p, unsigned char v, size_t n, void* s) {
  (void)s;
  CUresult rc = current();
  if (rc) return rc;
  memset((void*)p, v, n);
  return 0;
}

/* The batched-copy kernel (native/gpu/batched_copy.ptx) as its contract
 * says: block row y copies entry y of the parameter (count, then dst, src
 * and bytes arrays of 64), rows >= count do nothing. Logs "kernel <count>",
 * then "unit <w>" per copy: the unit the real kernel copies it in (16 when
 * source and destination are both 16-byte aligned, else 4 when both are
 * 4-byte aligned, else 1).
 * STUB_CUDA_NO_MODULES set: the driver refuses to load any image. */
static int stub_module, stub_function;
CUresult cuModuleLoadData(void** module, const void* image) {
  CUresult rc = current();
  if (rc) return rc;
  if (getenv("STUB_CUDA_NO_MODULES") || !strstr((const char*)image, ".entry ring_batched_copy")) return 200;
  *module = &stub_module;
  return 0;
}
CUresult cuModuleGetFunction(void** fn, void* module, const char* name) {
  CUresult rc = current();
  if (rc) return rc;
  if (module != &stub_module || strcmp(name, "ring_batched_copy") != 0) return 500; /* CUDA_ERROR_NOT_FOUND */
  *fn = &stub_function;
  return 0;
}
CUresult cuLaunchKernel(void* fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared, void* stream, void** params, void** extra) {
  (void)gz; (void)bx; (void)by; (void)bz; (void)shared; (void)stream; (void)extra;
  CUresult rc = current();
  if (rc) return rc;
  if (fn != &stub_function || gx == 0) return INVALID_VALUE;
  const unsigned char* args = (const unsigned char*)params[0];
  unsigned count;
  memcpy(&count, args, 4);
  note("kernel", count);
  for (unsigned y = 0; y < gy && y < count; ++y) {
    unsigned long long dst, src, bytes;
    memcpy(&dst, args + 8 + 8 * y, 8);
    memcpy(&src, args + 520 + 8 * y, 8);
    memcpy(&bytes, args + 1032 + 8 * y, 8);
    note("unit", (dst | src) % 16 == 0 ? 16 : (dst | src) % 4 == 0 ? 4 : 1);
    memmove((void*)dst, (const void*)src, bytes);
  }
  return 0;
}
