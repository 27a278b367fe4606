// NCCL, loaded at run time.
//
// As for the CUDA driver (cuda_driver.h), the engine declares the few NCCL
// types and functions it uses (nccl.h's ABI, stable since NCCL 2.0) and
// resolves them with dlopen. Where the library comes from, first found
// wins:
//   1. RING_NCCL_LIBRARY, a path (nothing else is tried when it is set);
//   2. a libnccl.so.2 already loaded in the process (torch's or cupy's), so
//      the engine and the framework share one copy;
//   3. the paths the caller passes (the nvidia-nccl wheel in site-packages);
//   4. libnccl.so.2 on the loader's default path.
// A library older than kMinNcclVersion, or lacking a function, is refused
// with an error naming it.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "gpu/cuda_driver.h"

namespace ring::gpu {

using ncclResult_t = int;
using ncclComm_t = struct ncclComm*;
struct ncclUniqueId {
  char internal[128];
};
enum ncclDataType_t : int {
  ncclInt8 = 0, ncclUint8 = 1, ncclInt32 = 2, ncclUint32 = 3, ncclInt64 = 4, ncclUint64 = 5,
  ncclFloat16 = 6, ncclFloat32 = 7, ncclFloat64 = 8, ncclBfloat16 = 9,
};
enum ncclRedOp_t : int { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 };
enum ncclScalarResidence_t : int { ncclScalarDevice = 0, ncclScalarHostImmediate = 1 };
constexpr ncclResult_t ncclSuccess = 0;
constexpr ncclResult_t ncclInProgress = 7;

// NCCL's ncclConfig_t as 2.14 introduced it; later versions append fields
// and read only `size` bytes of what the caller passes (NCCL_CONFIG_INITIALIZER
// sets the magic and version). blocking = 0: ncclCommInitRankConfig returns
// ncclInProgress at once and ncclCommGetAsyncError reports the init's state.
struct ncclConfig_t {
  size_t size = sizeof(ncclConfig_t);
  unsigned magic = 0xcafebeef;
  unsigned version = 21400;
  int blocking = 1;
};

// NCCL's version code: 10000 * major + 100 * minor + patch (2.9 and later;
// 1000 * major + 100 * minor + patch before).
constexpr int kMinNcclVersion = 21200;  // 2.12.0: ncclAvg, PreMulSum, bfloat16
std::string nccl_version_text(int code);  // 21905 -> "2.19.5"

struct NcclLibrary {
  bool loaded = false;
  std::string path;    // the file loaded
  std::string source;  // how it was found: "RING_NCCL_LIBRARY", "already loaded", "wheel", "default path"
  std::string error;   // why none was loaded (empty when loaded)
  int version = 0;

  ncclResult_t (*ncclGetVersion)(int*) = nullptr;
  const char* (*ncclGetErrorString)(ncclResult_t) = nullptr;
  ncclResult_t (*ncclGetUniqueId)(ncclUniqueId*) = nullptr;
  ncclResult_t (*ncclCommInitRank)(ncclComm_t*, int, ncclUniqueId, int) = nullptr;
  // NCCL 2.14 and later; null before (nccl_comms.cc then watches the blocking init).
  ncclResult_t (*ncclCommInitRankConfig)(ncclComm_t*, int, ncclUniqueId, int, ncclConfig_t*) = nullptr;
  ncclResult_t (*ncclCommDestroy)(ncclComm_t) = nullptr;
  ncclResult_t (*ncclCommAbort)(ncclComm_t) = nullptr;
  ncclResult_t (*ncclCommGetAsyncError)(ncclComm_t, ncclResult_t*) = nullptr;
  ncclResult_t (*ncclAllReduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                                CUstream) = nullptr;
  ncclResult_t (*ncclBroadcast)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, CUstream) = nullptr;
  ncclResult_t (*ncclAllGather)(const void*, void*, size_t, ncclDataType_t, ncclComm_t, CUstream) = nullptr;
  ncclResult_t (*ncclReduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t,
                             CUstream) = nullptr;
  ncclResult_t (*ncclReduceScatter)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                                    CUstream) = nullptr;
  ncclResult_t (*ncclSend)(const void*, size_t, ncclDataType_t, int, ncclComm_t, CUstream) = nullptr;
  ncclResult_t (*ncclRecv)(void*, size_t, ncclDataType_t, int, ncclComm_t, CUstream) = nullptr;
  ncclResult_t (*ncclGroupStart)() = nullptr;
  ncclResult_t (*ncclGroupEnd)() = nullptr;
  ncclResult_t (*ncclRedOpCreatePreMulSum)(ncclRedOp_t*, void*, ncclDataType_t, ncclScalarResidence_t,
                                           ncclComm_t) = nullptr;
  ncclResult_t (*ncclRedOpDestroy)(ncclRedOp_t, ncclComm_t) = nullptr;
};

// The process's NCCL: searched for on the first call (with `wheel_paths` as
// step 3), the same object afterwards whatever the arguments. Thread-safe;
// never throws.
const NcclLibrary& nccl_library(const std::vector<std::string>& wheel_paths = {});

// Throws RingError(Internal) "<what>: NCCL error <code> (<NCCL's text>)"
// unless `rc` is ncclSuccess.
void nccl_check(ncclResult_t rc, const char* what);

// The same for a call on communicator `comm`. The engine's communicators
// are non-blocking (nccl_comms.h): a call may return ncclInProgress while
// NCCL still enqueues it (connecting to peers at a first use, say), and no
// other call on the communicator may come before that is done. Waits for
// it, polling ncclCommGetAsyncError, for at most nccl_wait_limit() seconds
// (then PeerFailure); NCCL's remote and system errors are PeerFailure.
void nccl_check(ncclResult_t rc, const char* what, ncclComm_t comm);
// The limit of those waits: RING_TIMEOUT_SECONDS, set by the backend.
void set_nccl_wait_limit(double seconds);
double nccl_wait_limit();

}  // namespace ring::gpu
