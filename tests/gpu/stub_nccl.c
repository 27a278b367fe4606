/* A stand-in for libnccl.so.2 for the CPU tests of the engine's NCCL code,
 * to pair with stub_cuda.c (device memory is host memory, streams run their
 * work at once). Communicators of one rank only: every collective is the
 * one-rank result (a copy, scaled for PreMulSum), so a job of one process
 * runs the NCCL backend's real fusion, copies and calls; a communicator of
 * several ranks is refused (ncclInvalidUsage). Built with
 * -DSTUB_NCCL_VERSION=<code> it reports that version (default 2.27.3);
 * -DSTUB_OMIT_ALLREDUCE leaves ncclAllReduce out. STUB_NCCL_ASYNC_ERROR
 * (environment), a result code, is what ncclCommGetAsyncError reports
 * (default 0, none). STUB_NCCL_LOG, a path:
 * each call appends its name and element count there. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef STUB_NCCL_VERSION
#define STUB_NCCL_VERSION 22703
#endif

enum { Int8, Uint8, Int32, Uint32, Int64, Uint64, Float16, Float32, Float64, Bfloat16 };
enum { Sum, Prod, Max, Min, Avg, FirstCreated };

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

static double created[64]; /* PreMulSum factors, by op - FirstCreated */
static int n_created;

static void scale(void* buf, size_t count, int dt, double factor) {
  for (size_t i = 0; i < count; ++i) {
    if (dt == Float32) ((float*)buf)[i] = (float)(((float*)buf)[i] * (float)factor);
    if (dt == Float64) ((double*)buf)[i] *= factor;
    if (dt == Float16) ((_Float16*)buf)[i] = (_Float16)((float)((_Float16*)buf)[i] * (float)factor);
    if (dt == Bfloat16) {
      uint32_t bits = (uint32_t)((uint16_t*)buf)[i] << 16;
      float f;
      memcpy(&f, &bits, 4);
      f *= (float)factor;
      memcpy(&bits, &f, 4);
      ((uint16_t*)buf)[i] = (uint16_t)((bits + 0x7fff + ((bits >> 16) & 1)) >> 16);
    }
  }
}

/* The one-rank reduction: recv = op(send). */
static void reduce1(const void* send, void* recv, size_t count, int dt, int op) {
  memmove(recv, send, count * size_of(dt));
  if (op >= FirstCreated) scale(recv, count, dt, created[op - FirstCreated]);
}

int ncclGetVersion(int* v) { *v = STUB_NCCL_VERSION; return 0; }
const char* ncclGetErrorString(int rc) {
  if (rc == 5) return "invalid usage (stub: one rank only)";
  if (rc == 6) return "remote process exited or there was a network error (stub)";
  return "stub error";
}
int ncclGetUniqueId(char id[128]) { memset(id, 0, 128); return 0; }
int ncclCommInitRank(void** c, int n, char id[128], int r) {
  (void)id; (void)r;
  note("ncclCommInitRank", (size_t)n);
  if (n != 1) return 5;
  *c = malloc(1);
  return 0;
}
int ncclCommDestroy(void* c) { free(c); return 0; }
int ncclCommAbort(void* c) { free(c); return 0; }
int ncclCommGetAsyncError(void* c, int* e) {
  const char* v = getenv("STUB_NCCL_ASYNC_ERROR");
  (void)c;
  *e = v ? atoi(v) : 0;
  return 0;
}
#ifndef STUB_OMIT_ALLREDUCE
int ncclAllReduce(const void* s, void* r, size_t n, int dt, int op, void* c, void* st) {
  (void)c; (void)st;
  note("ncclAllReduce", n);
  reduce1(s, r, n, dt, op);
  return 0;
}
#endif
int ncclReduce(const void* s, void* r, size_t n, int dt, int op, int root, void* c, void* st) {
  (void)c; (void)st; (void)root;
  note("ncclReduce", n);
  reduce1(s, r, n, dt, op);
  return 0;
}
int ncclBroadcast(const void* s, void* r, size_t n, int dt, int root, void* c, void* st) {
  (void)c; (void)st; (void)root;
  note("ncclBroadcast", n);
  memmove(r, s, n * size_of(dt));
  return 0;
}
int ncclAllGather(const void* s, void* r, size_t n, int dt, void* c, void* st) {
  (void)c; (void)st;
  note("ncclAllGather", n);
  memmove(r, s, n * size_of(dt));
  return 0;
}
int ncclReduceScatter(const void* s, void* r, size_t n, int dt, int op, void* c, void* st) {
  (void)c; (void)st;
  note("ncclReduceScatter", n);
  reduce1(s, r, n, dt, op);
  return 0;
}
/* Sends and receives to oneself pair up in order within a group. */
static const void* sent;
static size_t sent_bytes;
int ncclSend(const void* b, size_t n, int dt, int peer, void* c, void* st) {
  (void)peer; (void)c; (void)st;
  note("ncclSend", n);
  sent = b;
  sent_bytes = n * size_of(dt);
  return 0;
}
int ncclRecv(void* b, size_t n, int dt, int peer, void* c, void* st) {
  (void)peer; (void)c; (void)st;
  note("ncclRecv", n);
  if (!sent || sent_bytes != n * size_of(dt)) return 5;
  memmove(b, sent, sent_bytes);
  sent = 0;
  return 0;
}
int ncclGroupStart(void) { return 0; }
int ncclGroupEnd(void) { return 0; }
int ncclRedOpCreatePreMulSum(int* op, void* scalar, int dt, int residence, void* c) {
  (void)residence; (void)c;
  double f = 0;
  if (dt == Float32) f = *(float*)scalar;
  if (dt == Float64) f = *(double*)scalar;
  if (dt == Float16) f = (float)*(_Float16*)scalar;
  if (dt == Bfloat16) {
    uint32_t bits = (uint32_t)*(uint16_t*)scalar << 16;
    float g;
    memcpy(&g, &bits, 4);
    f = g;
  }
  if (n_created == 64) return 5;
  created[n_created] = f;
  *op = FirstCreated + n_created++;
  return 0;
}
int ncclRedOpDestroy(int op, void* c) { (void)op; (void)c; return 0; }
