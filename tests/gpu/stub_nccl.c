/* A stand-in for libnccl.so.2 for the CPU tests of the NCCL loader: it has
 * NCCL's functions (all of them succeed and do nothing) and reports the
 * version STUB_NCCL_VERSION (a version code, set at build time).
 * -DSTUB_OMIT_ALLREDUCE leaves ncclAllReduce out. */
#include <stddef.h>

#ifndef STUB_NCCL_VERSION
#define STUB_NCCL_VERSION 22703
#endif

int ncclGetVersion(int* v) { *v = STUB_NCCL_VERSION; return 0; }
const char* ncclGetErrorString(int rc) { (void)rc; return "stub"; }
int ncclGetUniqueId(void* id) { (void)id; return 0; }
int ncclCommInitRank(void** c, int n, char id[128], int r) { (void)n; (void)id; (void)r; *c = 0; return 0; }
int ncclCommDestroy(void* c) { (void)c; return 0; }
int ncclCommAbort(void* c) { (void)c; return 0; }
int ncclCommGetAsyncError(void* c, int* e) { (void)c; *e = 0; return 0; }
#ifndef STUB_OMIT_ALLREDUCE
int ncclAllReduce(void) { return 0; }
#endif
int ncclBroadcast(void) { return 0; }
int ncclAllGather(void) { return 0; }
int ncclReduceScatter(void) { return 0; }
int ncclSend(void) { return 0; }
int ncclRecv(void) { return 0; }
int ncclGroupStart(void) { return 0; }
int ncclGroupEnd(void) { return 0; }
int ncclRedOpCreatePreMulSum(void) { return 0; }
int ncclRedOpDestroy(void) { return 0; }
