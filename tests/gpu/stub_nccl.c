/* A stand-in for libnccl.so.2 for the CPU tests of the engine's NCCL code,
 * to pair with stub_cuda.c (device memory is host memory, streams run their
 * work at once, so every call here completes before it returns).
 *
 * Communicators of any number of processes on this machine: the unique id
 * names a shared-memory file (/dev/shm) where each rank has a slot and each
 * pair of ranks a mailbox. A collective copies this rank's data into its
 * slot, meets the others at a barrier, computes its result from the slots
 * (reducing in rank order, rounding to the element type at every step),
 * and meets them again. So a job of several processes runs the NCCL
 * backend's real fusion, offsets, groups and calls, and gets NCCL's
 * results; ranks must call collectives in the same order (the engine does).
 * Sends write the peer's mailbox and return; receives wait for it. A peer
 * that does not come within 60 s makes the call fail with ncclRemoteError.
 *
 * Built with -DSTUB_NCCL_VERSION=<code> it reports that version (default
 * 2.27.3); -DSTUB_OMIT_ALLREDUCE leaves ncclAllReduce out.
 * STUB_NCCL_ASYNC_ERROR (environment), a result code, is what
 * ncclCommGetAsyncError reports (default 0, none). STUB_NCCL_LOG, a path:
 * each call appends its name and element count there. */
#include <fcntl.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#ifndef STUB_NCCL_VERSION
#define STUB_NCCL_VERSION 22703
#endif

enum { Int8, Uint8, Int32, Uint32, Int64, Uint64, Float16, Float32, Float64, Bfloat16 };
enum { Sum, Prod, Max, Min, Avg, FirstCreated };
enum { Success = 0, InvalidArgument = 4, InvalidUsage = 5, RemoteError = 6 };

#define SLOT_BYTES ((size_t)8 << 20)
#define BOX_BYTES ((size_t)1 << 20)
#define MAX_RANKS 16

static void note(const char* what, size_t n) {
  const char* path = getenv("STUB_NCCL_LOG");
  if (!path || !*path) return;
  FILE* f = fopen(path, "a");
  if (!f) return;
  fprintf(f, "%s %zu\n", what, n);
  fclose(f);
}

static size_t size_of(int dt) {
  switch (dt) {
    case Int8: case Uint8: return 1;
    case Float16: case Bfloat16: return 2;
    case Int32: case Uint32: case Float32: return 4;
    default: return 8;
  }
}

/* ---------------------------------------------------------------- shared memory */

typedef struct {
  uint32_t count, sense; /* the barrier */
  char pad[56];
} Header;

typedef struct {
  uint32_t full, pad; /* full: a message waits for the receiver */
  uint64_t bytes;
} Box;

typedef struct {
  int n, rank, sense;
  char name[128];
  uint8_t* base;
  size_t size;
} Comm;

static Header* header(Comm* c) { return (Header*)c->base; }
static uint8_t* slot(Comm* c, int r) { return c->base + sizeof(Header) + (size_t)r * SLOT_BYTES; }
static Box* box(Comm* c, int from, int to) {
  uint8_t* boxes = c->base + sizeof(Header) + (size_t)c->n * SLOT_BYTES;
  return (Box*)(boxes + ((size_t)from * c->n + to) * (sizeof(Box) + BOX_BYTES));
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

/* Waits until *word == want; 0, or RemoteError after 60 s. */
static int wait_for(uint32_t* word, uint32_t want) {
  const double deadline = now() + 60.0;
  while (__atomic_load_n(word, __ATOMIC_ACQUIRE) != want) {
    if (now() > deadline) return RemoteError;
    sched_yield();
  }
  return Success;
}

static int barrier(Comm* c) {
  Header* h = header(c);
  c->sense ^= 1;
  if (__atomic_add_fetch(&h->count, 1, __ATOMIC_ACQ_REL) == (uint32_t)c->n) {
    __atomic_store_n(&h->count, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&h->sense, (uint32_t)c->sense, __ATOMIC_RELEASE);
    return Success;
  }
  return wait_for(&h->sense, (uint32_t)c->sense);
}

/* ---------------------------------------------------------------- reductions */

static double created[64]; /* PreMulSum factors, by op - FirstCreated */
static int n_created;

static float bf16_to_float(uint16_t v) {
  uint32_t bits = (uint32_t)v << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}
static uint16_t float_to_bf16(float f) {
  uint32_t bits;
  memcpy(&bits, &f, 4);
  return (uint16_t)((bits + 0x7fff + ((bits >> 16) & 1)) >> 16);
}

/* One floating element as a double, and back (rounded to the element type). */
static double load(const void* p, size_t i, int dt) {
  switch (dt) {
    case Float16: return (double)((const _Float16*)p)[i];
    case Float32: return (double)((const float*)p)[i];
    case Float64: return ((const double*)p)[i];
    default: return (double)bf16_to_float(((const uint16_t*)p)[i]);
  }
}
static void store(void* p, size_t i, int dt, double v) {
  switch (dt) {
    case Float16: ((_Float16*)p)[i] = (_Float16)(float)v; break;
    case Float32: ((float*)p)[i] = (float)v; break;
    case Float64: ((double*)p)[i] = v; break;
    default: ((uint16_t*)p)[i] = float_to_bf16((float)v);
  }
}
static double rounded(int dt, double v) {
  char tmp[8];
  store(tmp, 0, dt, v);
  return load(tmp, 0, dt);
}
static int is_float(int dt) { return dt == Float16 || dt == Float32 || dt == Float64 || dt == Bfloat16; }

#define INT_REDUCE(T)                                                     \
  do {                                                                    \
    T* out = (T*)dst;                                                     \
    for (size_t i = 0; i < count; ++i) {                                  \
      T acc = ((const T*)srcs[0])[i];                                     \
      for (int r = 1; r < n; ++r) {                                       \
        T x = ((const T*)srcs[r])[i];                                     \
        if (op == Sum) acc = (T)(acc + x);                                \
        if (op == Prod) acc = (T)(acc * x);                               \
        if (op == Max) acc = x > acc ? x : acc;                           \
        if (op == Min) acc = x < acc ? x : acc;                           \
      }                                                                   \
      out[i] = acc;                                                       \
    }                                                                     \
  } while (0)

/* dst[i] = op over r of srcs[r][i], in rank order; dst may be srcs[k]. */
static int reduce_into(void* dst, const void* const* srcs, int n, size_t count, int dt, int op) {
  if (!is_float(dt)) {
    if (op == Avg || op >= FirstCreated) return InvalidArgument;
    switch (dt) {
      case Int8: INT_REDUCE(int8_t); break;
      case Uint8: INT_REDUCE(uint8_t); break;
      case Int32: INT_REDUCE(int32_t); break;
      case Uint32: INT_REDUCE(uint32_t); break;
      case Int64: INT_REDUCE(int64_t); break;
      default: INT_REDUCE(uint64_t);
    }
    return Success;
  }
  const double factor = op >= FirstCreated ? created[op - FirstCreated] : 1.0;
  for (size_t i = 0; i < count; ++i) {
    double acc = rounded(dt, load(srcs[0], i, dt) * factor);
    for (int r = 1; r < n; ++r) {
      const double x = rounded(dt, load(srcs[r], i, dt) * factor);
      if (op == Sum || op == Avg || op >= FirstCreated) acc = rounded(dt, acc + x);
      if (op == Prod) acc = rounded(dt, acc * x);
      if (op == Max) acc = x > acc ? x : acc;
      if (op == Min) acc = x < acc ? x : acc;
    }
    if (op == Avg) acc = rounded(dt, acc * (1.0 / n));
    store(dst, i, dt, acc);
  }
  return Success;
}

/* srcs[r] = slot r, offset by `offset` bytes. */
static void slots(Comm* c, size_t offset, const void** srcs) {
  for (int r = 0; r < c->n; ++r) srcs[r] = slot(c, r) + offset;
}

/* Copies `bytes` of `src` into this rank's slot and waits for every rank. */
static int contribute(Comm* c, const void* src, size_t bytes) {
  if (bytes > SLOT_BYTES) return InvalidArgument;
  if (src) memcpy(slot(c, c->rank), src, bytes);
  return barrier(c);
}

/* ---------------------------------------------------------------- the API */

int ncclGetVersion(int* v) { *v = STUB_NCCL_VERSION; return 0; }
const char* ncclGetErrorString(int rc) {
  if (rc == InvalidUsage) return "invalid usage (stub)";
  if (rc == InvalidArgument) return "invalid argument (stub: too large, or no such reduction)";
  if (rc == RemoteError) return "remote process exited or there was a network error (stub)";
  return "stub error";
}
/* NCCL's ncclUniqueId, passed by value as NCCL does. */
typedef struct {
  char internal[128];
} UniqueId;

int ncclGetUniqueId(UniqueId* id) {
  memset(id, 0, sizeof(*id));
  snprintf(id->internal, sizeof(id->internal), "/ring_stub_nccl_%d_%lld_%d", (int)getpid(), (long long)(now() * 1e9),
           rand());
  return 0;
}
int ncclCommInitRank(void** out, int n, UniqueId uid, int rank) {
  const char* id = uid.internal;
  note("ncclCommInitRank", (size_t)n);
  if (n < 1 || n > MAX_RANKS || rank < 0 || rank >= n || id[0] != '/') return InvalidUsage;
  Comm* c = calloc(1, sizeof(Comm));
  c->n = n;
  c->rank = rank;
  snprintf(c->name, sizeof(c->name), "%s", id);
  c->size = sizeof(Header) + (size_t)n * SLOT_BYTES + (size_t)n * n * (sizeof(Box) + BOX_BYTES);
  int fd = shm_open(c->name, O_CREAT | O_RDWR, 0600);
  if (fd < 0 || ftruncate(fd, (off_t)c->size) != 0) return InvalidUsage;
  c->base = mmap(NULL, c->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (c->base == MAP_FAILED) return InvalidUsage;
  int rc = barrier(c); /* every rank has the file open: it can go */
  if (rank == 0) shm_unlink(c->name);
  if (rc != Success) return rc;
  *out = c;
  return 0;
}
static int release(void* p) {
  Comm* c = p;
  if (!c) return 0;
  munmap(c->base, c->size);
  free(c);
  return 0;
}
int ncclCommDestroy(void* c) {
  note("ncclCommDestroy", c ? (size_t)((Comm*)c)->n : 0);
  return release(c);
}
/* Abort may come from another thread while a call waits: the memory stays. */
int ncclCommAbort(void* c) { (void)c; return 0; }
int ncclCommGetAsyncError(void* c, int* e) {
  const char* v = getenv("STUB_NCCL_ASYNC_ERROR");
  (void)c;
  *e = v ? atoi(v) : 0;
  return 0;
}
#ifndef STUB_OMIT_ALLREDUCE
int ncclAllReduce(const void* s, void* r, size_t n, int dt, int op, void* comm, void* st) {
  Comm* c = comm;
  const void* srcs[MAX_RANKS];
  (void)st;
  note("ncclAllReduce", n);
  int rc = contribute(c, s, n * size_of(dt));
  if (rc) return rc;
  slots(c, 0, srcs);
  rc = reduce_into(r, srcs, c->n, n, dt, op);
  return rc ? rc : barrier(c);
}
#endif
int ncclReduce(const void* s, void* r, size_t n, int dt, int op, int root, void* comm, void* st) {
  Comm* c = comm;
  const void* srcs[MAX_RANKS];
  (void)st;
  note("ncclReduce", n);
  int rc = contribute(c, s, n * size_of(dt));
  if (rc) return rc;
  slots(c, 0, srcs);
  if (c->rank == root) rc = reduce_into(r, srcs, c->n, n, dt, op);
  return rc ? rc : barrier(c);
}
int ncclReduceScatter(const void* s, void* r, size_t n, int dt, int op, void* comm, void* st) {
  Comm* c = comm;
  const void* srcs[MAX_RANKS];
  (void)st;
  note("ncclReduceScatter", n);
  int rc = contribute(c, s, n * c->n * size_of(dt));
  if (rc) return rc;
  slots(c, (size_t)c->rank * n * size_of(dt), srcs);
  rc = reduce_into(r, srcs, c->n, n, dt, op);
  return rc ? rc : barrier(c);
}
int ncclBroadcast(const void* s, void* r, size_t n, int dt, int root, void* comm, void* st) {
  Comm* c = comm;
  (void)st;
  note("ncclBroadcast", n);
  int rc = contribute(c, c->rank == root ? s : NULL, n * size_of(dt));
  if (rc) return rc;
  memmove(r, slot(c, root), n * size_of(dt));
  return barrier(c);
}
int ncclAllGather(const void* s, void* r, size_t n, int dt, void* comm, void* st) {
  Comm* c = comm;
  const size_t bytes = n * size_of(dt);
  (void)st;
  note("ncclAllGather", n);
  int rc = contribute(c, s, bytes);
  if (rc) return rc;
  for (int k = 0; k < c->n; ++k) memmove((uint8_t*)r + (size_t)k * bytes, slot(c, k), bytes);
  return barrier(c);
}
int ncclSend(const void* b, size_t n, int dt, int peer, void* comm, void* st) {
  Comm* c = comm;
  Box* m = box(c, c->rank, peer);
  const size_t bytes = n * size_of(dt);
  (void)st;
  note("ncclSend", n);
  if (bytes > BOX_BYTES || peer < 0 || peer >= c->n) return InvalidArgument;
  int rc = wait_for(&m->full, 0); /* the peer took the last one */
  if (rc) return rc;
  memcpy(m + 1, b, bytes);
  m->bytes = bytes;
  __atomic_store_n(&m->full, 1, __ATOMIC_RELEASE);
  return Success;
}
int ncclRecv(void* b, size_t n, int dt, int peer, void* comm, void* st) {
  Comm* c = comm;
  Box* m = box(c, peer, c->rank);
  (void)st;
  note("ncclRecv", n);
  if (peer < 0 || peer >= c->n) return InvalidArgument;
  int rc = wait_for(&m->full, 1);
  if (rc) return rc;
  if (m->bytes != n * size_of(dt)) return InvalidUsage;
  memcpy(b, m + 1, m->bytes);
  __atomic_store_n(&m->full, 0, __ATOMIC_RELEASE);
  return Success;
}
int ncclGroupStart(void) { return 0; }
int ncclGroupEnd(void) { return 0; }
int ncclRedOpCreatePreMulSum(int* op, void* scalar, int dt, int residence, void* c) {
  (void)residence; (void)c;
  double f = 0;
  if (dt == Float32) f = *(float*)scalar;
  if (dt == Float64) f = *(double*)scalar;
  if (dt == Float16) f = (float)*(_Float16*)scalar;
  if (dt == Bfloat16) f = bf16_to_float(*(uint16_t*)scalar);
  if (n_created == 64) return InvalidUsage;
  created[n_created] = f;
  *op = FirstCreated + n_created++;
  return 0;
}
/* Operators are made and destroyed around each call: the last one made is freed. */
int ncclRedOpDestroy(int op, void* c) {
  (void)c;
  if (op == FirstCreated + n_created - 1) --n_created;
  return 0;
}
