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
 * that does not come within 60 s makes a collective fail with
 * ncclRemoteError.
 *
 * As strict as NCCL where the engine could get it wrong:
 *  - ncclCommInitRank blocks until every rank of the communicator has
 *    called it, with no time limit (a rank that never comes blocks the
 *    others). ncclCommInitRankConfig with config.blocking = 0 returns
 *    ncclInProgress at once; ncclCommGetAsyncError says ncclInProgress
 *    until every rank has come, then ncclSuccess; ncclCommAbort gives up.
 *  - Each rank's device is its current context's (cuCtxGetDevice of the
 *    driver RING_CUDA_DRIVER_LIBRARY names; device 0 without one, as the
 *    CUDA runtime does); two ranks of one host (NCCL_HOSTID, else the host
 *    name) on one device make the init fail with ncclInvalidUsage, as
 *    NCCL's "Duplicate GPU detected".
 *  - A communicator after ncclCommAbort or ncclCommDestroy is poisoned, not
 *    freed: any call with it (ncclCommGetAsyncError included) prints why to
 *    stderr and ends the process with abort(), where NCCL would read freed
 *    memory. A call already waiting when another thread aborts returns
 *    ncclInternalError.
 *
 * Built with -DSTUB_NCCL_VERSION=<code> it reports that version (default
 * 2.27.3); -DSTUB_OMIT_ALLREDUCE leaves ncclAllReduce out, -DSTUB_NO_CONFIG
 * ncclCommInitRankConfig (as NCCL before 2.14).
 * A non-blocking communicator's collectives (and the ncclGroupEnd of a group
 * of them) return ncclInProgress; ncclCommGetAsyncError says ncclInProgress
 * once more, then ncclSuccess; a call on it before that is ncclInvalidUsage,
 * as NCCL requires.
 * STUB_NCCL_INIT_STUCK (environment), when set: this process never arrives
 * at a communicator's init (blocking: it never returns; non-blocking: it
 * stays in progress), as a peer stuck or lost between the id and the init.
 * STUB_NCCL_ASYNC_ERROR (environment), a result code, is what
 * ncclCommGetAsyncError reports for a communicator that finished its init
 * (default 0, none). STUB_NCCL_LOG, a path: each call appends its name and
 * element count (rank count for init, destroy and abort) there. */
#include <dlfcn.h>
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
enum { Success = 0, UnhandledCudaError = 1, InternalError = 3, InvalidArgument = 4, InvalidUsage = 5, RemoteError = 6,
       InProgress = 7 };

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
  int32_t device[MAX_RANKS];  /* each rank's, written before the init's barrier */
  uint64_t host[MAX_RANKS];
} Header;

typedef struct {
  uint32_t full, pad; /* full: a message waits for the receiver */
  uint64_t bytes;
} Box;

enum { Live = 1, Joining = 2, Poisoned = 3 };
typedef struct {
  uint32_t magic;  /* kCommMagic */
  int state;       /* Live, Joining (a non-blocking init not finished) or Poisoned */
  int aborted;     /* set by ncclCommAbort from any thread: waits give up */
  int stuck;       /* STUB_NCCL_INIT_STUCK: this rank never arrives at the init */
  int nonblocking; /* made with config.blocking = 0: calls return ncclInProgress */
  int pending;     /* looks of ncclCommGetAsyncError until the last call is done */
  int n, rank, sense;
  char name[128];
  uint8_t* base;
  size_t size;
} Comm;
#define COMM_MAGIC 0xc0111u

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

/* Waits until *word == want; 0, InternalError when `c` is aborted meanwhile,
 * or RemoteError after `seconds` (< 0: no limit). */
static int wait_for(Comm* c, uint32_t* word, uint32_t want, double seconds) {
  const double deadline = now() + seconds;
  while (__atomic_load_n(word, __ATOMIC_ACQUIRE) != want) {
    if (__atomic_load_n(&c->aborted, __ATOMIC_ACQUIRE)) return InternalError;
    if (seconds >= 0 && now() > deadline) return RemoteError;
    sched_yield();
  }
  return Success;
}

/* The barrier in two halves: arrive, then (at once or by polling) done. */
static void arrive(Comm* c) {
  Header* h = header(c);
  c->sense ^= 1;
  if (__atomic_add_fetch(&h->count, 1, __ATOMIC_ACQ_REL) == (uint32_t)c->n) {
    __atomic_store_n(&h->count, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&h->sense, (uint32_t)c->sense, __ATOMIC_RELEASE);
  }
}
static int arrived(Comm* c) { return __atomic_load_n(&header(c)->sense, __ATOMIC_ACQUIRE) == (uint32_t)c->sense; }

static int barrier(Comm* c) {
  arrive(c);
  return wait_for(c, &header(c)->sense, (uint32_t)c->sense, 60.0);
}

/* The communicator behind `p` for a call named `what`: a poisoned one ends
 * the process (NCCL would use freed memory), one still joining is refused. */
static Comm* use(void* p, const char* what, int* rc) {
  Comm* c = p;
  *rc = Success;
  if (!c || c->magic != COMM_MAGIC) {
    fprintf(stderr, "stub NCCL: %s on something that is not a communicator\n", what);
    abort();
  }
  if (c->state == Poisoned) {
    fprintf(stderr, "stub NCCL: %s on a communicator after ncclCommAbort or ncclCommDestroy (use after free)\n",
            what);
    fflush(stderr);
    abort();
  }
  if (c->state == Joining) *rc = InvalidUsage;
  if (__atomic_load_n(&c->pending, __ATOMIC_ACQUIRE) > 0) {
    fprintf(stderr, "stub NCCL: %s while the communicator's last call is still in progress (ncclInProgress)\n", what);
    *rc = InvalidUsage;
  }
  return c;
}

/* What a call that did its work on `c` returns: on a non-blocking communicator
 * ncclInProgress outside a group (NCCL's ncclGroupEnd says it for a group's). */
static __thread int group_depth;
static __thread Comm* group_comm;
static int done(Comm* c, int rc) {
  if (rc != Success || !c->nonblocking) return rc;
  if (group_depth > 0) {
    group_comm = c;
    return Success;
  }
  __atomic_store_n(&c->pending, 2, __ATOMIC_RELEASE);
  return InProgress;
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
/* This process's device: its current context's, as the driver says (0 without one). */
static int current_device(void) {
  const char* path = getenv("RING_CUDA_DRIVER_LIBRARY");
  void* lib = dlopen(path && *path ? path : "libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  int dev = 0;
  if (!lib) return 0;
  int (*get)(int*) = (int (*)(int*))dlsym(lib, "cuCtxGetDevice");
  if (!get || get(&dev) != 0) dev = 0;
  dlclose(lib);
  return dev;
}
static uint64_t host_hash(void) {
  char name[256] = {0};
  const char* id = getenv("NCCL_HOSTID");
  if (id && *id) snprintf(name, sizeof(name), "%s", id);
  else gethostname(name, sizeof(name) - 1);
  uint64_t h = 1469598103934665603ull;
  for (const char* p = name; *p; ++p) h = (h ^ (uint8_t)*p) * 1099511628211ull;
  return h;
}

/* After the init's barrier: InvalidUsage when two ranks of one host share a device. */
static int check_devices(Comm* c) {
  Header* h = header(c);
  for (int a = 0; a < c->n; ++a)
    for (int b = a + 1; b < c->n; ++b)
      if (h->host[a] == h->host[b] && h->device[a] == h->device[b]) {
        if (c->rank == 0)
          fprintf(stderr, "stub NCCL: Duplicate GPU detected: rank %d and rank %d both on CUDA device %d\n", a, b,
                  h->device[a]);
        return InvalidUsage;
      }
  return Success;
}

/* The init up to the barrier's arrival: the file mapped, this rank's device written. */
static int join(Comm** out, int n, UniqueId uid, int rank) {
  const char* id = uid.internal;
  if (n < 1 || n > MAX_RANKS || rank < 0 || rank >= n || id[0] != '/') return InvalidUsage;
  Comm* c = calloc(1, sizeof(Comm));
  c->magic = COMM_MAGIC;
  c->state = Joining;
  c->n = n;
  c->rank = rank;
  snprintf(c->name, sizeof(c->name), "%s", id);
  c->size = sizeof(Header) + (size_t)n * SLOT_BYTES + (size_t)n * n * (sizeof(Box) + BOX_BYTES);
  int fd = shm_open(c->name, O_CREAT | O_RDWR, 0600);
  if (fd < 0 || ftruncate(fd, (off_t)c->size) != 0) return InvalidUsage;
  c->base = mmap(NULL, c->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (c->base == MAP_FAILED) return InvalidUsage;
  header(c)->device[rank] = current_device();
  header(c)->host[rank] = host_hash();
  c->stuck = getenv("STUB_NCCL_INIT_STUCK") != NULL;
  if (!c->stuck) arrive(c);
  *out = c;
  return Success;
}

/* Every rank has come (the file can go): the init's result. */
static int joined(Comm* c) {
  if (c->rank == 0) shm_unlink(c->name);
  int rc = check_devices(c);
  c->state = rc == Success ? Live : Poisoned;
  return rc;
}

int ncclCommInitRank(void** out, int n, UniqueId uid, int rank) {
  Comm* c = NULL;
  note("ncclCommInitRank", (size_t)n);
  int rc = join(&c, n, uid, rank);
  if (rc != Success) return rc;
  while (c->stuck) sleep(1);
  rc = wait_for(c, &header(c)->sense, (uint32_t)c->sense, -1.0); /* no time limit, as NCCL's */
  if (rc == Success) rc = joined(c);
  if (rc != Success) return rc;
  *out = c;
  return Success;
}

/* NCCL's ncclConfig_t as of 2.14: what every later version starts with. */
typedef struct {
  size_t size;
  unsigned magic, version;
  int blocking;
} Config;

#ifndef STUB_NO_CONFIG
int ncclCommInitRankConfig(void** out, int n, UniqueId uid, int rank, Config* config) {
  if (config && (config->magic != 0xcafebeef || config->size < sizeof(Config))) return InvalidArgument;
  if (!config || config->blocking != 0) return ncclCommInitRank(out, n, uid, rank);
  Comm* c = NULL;
  note("ncclCommInitRankConfig", (size_t)n);
  int rc = join(&c, n, uid, rank);
  if (rc != Success) return rc;
  c->nonblocking = 1;
  *out = c;
  return InProgress;
}
#endif

static Comm* poison(void* p, const char* what) {
  int rc;
  Comm* c = p;
  if (c && c->magic == COMM_MAGIC && c->state != Poisoned) __atomic_store_n(&c->pending, 0, __ATOMIC_RELEASE);
  c = use(p, what, &rc);
  note(what, (size_t)c->n);
  c->state = Poisoned;
  return c;
}
int ncclCommDestroy(void* p) {
  Comm* c = poison(p, "ncclCommDestroy");
  munmap(c->base, c->size);
  c->base = NULL;
  return Success;
}
/* Abort may come from another thread while a call waits: that call gives up, the memory stays. */
int ncclCommAbort(void* p) {
  if (!p) return Success;
  Comm* c = p;
  __atomic_store_n(&c->aborted, 1, __ATOMIC_RELEASE);
  poison(p, "ncclCommAbort");
  usleep(2000); /* NCCL's abort takes a while (it stops its proxy threads): a racing caller shows */
  return Success;
}
int ncclCommGetAsyncError(void* p, int* e) {
  int rc;
  Comm* c = use(p, "ncclCommGetAsyncError", &rc);
  if (c->state == Joining) {
    *e = !c->stuck && arrived(c) ? joined(c) : InProgress;
    return Success;
  }
  int left = __atomic_load_n(&c->pending, __ATOMIC_ACQUIRE);
  while (left > 0 && !__atomic_compare_exchange_n(&c->pending, &left, left - 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
  }
  if (left > 0) { /* the last call is queued (or, at the last look, done queueing) */
    *e = left > 1 ? InProgress : Success;
    return Success;
  }
  const char* v = getenv("STUB_NCCL_ASYNC_ERROR");
  *e = v ? atoi(v) : 0;
  return Success;
}
#ifndef STUB_OMIT_ALLREDUCE
int ncclAllReduce(const void* s, void* r, size_t n, int dt, int op, void* comm, void* st) {
  int urc;
  Comm* c = use(comm, "ncclAllReduce", &urc);
  if (urc) return urc;
  const void* srcs[MAX_RANKS];
  (void)st;
  note("ncclAllReduce", n);
  int rc = contribute(c, s, n * size_of(dt));
  if (rc) return rc;
  slots(c, 0, srcs);
  rc = reduce_into(r, srcs, c->n, n, dt, op);
  return done(c, rc ? rc : barrier(c));
}
#endif
int ncclReduce(const void* s, void* r, size_t n, int dt, int op, int root, void* comm, void* st) {
  int urc;
  Comm* c = use(comm, "ncclReduce", &urc);
  if (urc) return urc;
  const void* srcs[MAX_RANKS];
  (void)st;
  note("ncclReduce", n);
  int rc = contribute(c, s, n * size_of(dt));
  if (rc) return rc;
  slots(c, 0, srcs);
  if (c->rank == root) rc = reduce_into(r, srcs, c->n, n, dt, op);
  return done(c, rc ? rc : barrier(c));
}
int ncclReduceScatter(const void* s, void* r, size_t n, int dt, int op, void* comm, void* st) {
  int urc;
  Comm* c = use(comm, "ncclReduceScatter", &urc);
  if (urc) return urc;
  const void* srcs[MAX_RANKS];
  (void)st;
  note("ncclReduceScatter", n);
  int rc = contribute(c, s, n * c->n * size_of(dt));
  if (rc) return rc;
  slots(c, (size_t)c->rank * n * size_of(dt), srcs);
  rc = reduce_into(r, srcs, c->n, n, dt, op);
  return done(c, rc ? rc : barrier(c));
}
int ncclBroadcast(const void* s, void* r, size_t n, int dt, int root, void* comm, void* st) {
  int urc;
  Comm* c = use(comm, "ncclBroadcast", &urc);
  if (urc) return urc;
  (void)st;
  note("ncclBroadcast", n);
  int rc = contribute(c, c->rank == root ? s : NULL, n * size_of(dt));
  if (rc) return rc;
  memmove(r, slot(c, root), n * size_of(dt));
  return done(c, barrier(c));
}
int ncclAllGather(const void* s, void* r, size_t n, int dt, void* comm, void* st) {
  int urc;
  Comm* c = use(comm, "ncclAllGather", &urc);
  if (urc) return urc;
  const size_t bytes = n * size_of(dt);
  (void)st;
  note("ncclAllGather", n);
  int rc = contribute(c, s, bytes);
  if (rc) return rc;
  for (int k = 0; k < c->n; ++k) memmove((uint8_t*)r + (size_t)k * bytes, slot(c, k), bytes);
  return done(c, barrier(c));
}
int ncclSend(const void* b, size_t n, int dt, int peer, void* comm, void* st) {
  int urc;
  Comm* c = use(comm, "ncclSend", &urc);
  if (urc) return urc;
  Box* m = box(c, c->rank, peer);
  const size_t bytes = n * size_of(dt);
  (void)st;
  note("ncclSend", n);
  if (bytes > BOX_BYTES || peer < 0 || peer >= c->n) return InvalidArgument;
  int rc = wait_for(c, &m->full, 0, 60.0); /* the peer took the last one */
  if (rc) return rc;
  memcpy(m + 1, b, bytes);
  m->bytes = bytes;
  __atomic_store_n(&m->full, 1, __ATOMIC_RELEASE);
  return done(c, Success);
}
int ncclRecv(void* b, size_t n, int dt, int peer, void* comm, void* st) {
  int urc;
  Comm* c = use(comm, "ncclRecv", &urc);
  if (urc) return urc;
  Box* m = box(c, peer, c->rank);
  (void)st;
  note("ncclRecv", n);
  if (peer < 0 || peer >= c->n) return InvalidArgument;
  int rc = wait_for(c, &m->full, 1, 60.0);
  if (rc) return rc;
  if (m->bytes != n * size_of(dt)) return InvalidUsage;
  memcpy(b, m + 1, m->bytes);
  __atomic_store_n(&m->full, 0, __ATOMIC_RELEASE);
  return done(c, Success);
}
int ncclGroupStart(void) {
  ++group_depth;
  return 0;
}
int ncclGroupEnd(void) {
  if (group_depth == 0) return InvalidUsage;
  if (--group_depth > 0 || !group_comm) return Success;
  Comm* c = group_comm;
  group_comm = NULL;
  __atomic_store_n(&c->pending, 2, __ATOMIC_RELEASE);
  return InProgress;
}
int ncclRedOpCreatePreMulSum(int* op, void* scalar, int dt, int residence, void* comm) {
  int urc;
  (void)residence;
  use(comm, "ncclRedOpCreatePreMulSum", &urc);
  if (urc) return urc;
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
int ncclRedOpDestroy(int op, void* comm) {
  int urc;
  use(comm, "ncclRedOpDestroy", &urc);
  if (urc) return urc;
  if (op == FirstCreated + n_created - 1) --n_created;
  return 0;
}
