#include "gpu/nccl.h"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <thread>

#include "common/error.h"
#include "gpu/shared_library.h"

namespace ring::gpu {
namespace {

constexpr const char* kSoname = "libnccl.so.2";

void resolve_all(SharedLibrary& lib, NcclLibrary& n) {
  lib.resolve(n.ncclGetVersion, "ncclGetVersion");
  lib.resolve(n.ncclGetErrorString, "ncclGetErrorString");
  lib.resolve(n.ncclGetUniqueId, "ncclGetUniqueId");
  lib.resolve(n.ncclCommInitRank, "ncclCommInitRank");
  lib.resolve_optional(n.ncclCommInitRankConfig, "ncclCommInitRankConfig");
  lib.resolve(n.ncclCommDestroy, "ncclCommDestroy");
  lib.resolve(n.ncclCommAbort, "ncclCommAbort");
  lib.resolve(n.ncclCommGetAsyncError, "ncclCommGetAsyncError");
  lib.resolve(n.ncclAllReduce, "ncclAllReduce");
  lib.resolve(n.ncclBroadcast, "ncclBroadcast");
  lib.resolve(n.ncclAllGather, "ncclAllGather");
  lib.resolve(n.ncclReduce, "ncclReduce");
  lib.resolve(n.ncclReduceScatter, "ncclReduceScatter");
  lib.resolve(n.ncclSend, "ncclSend");
  lib.resolve(n.ncclRecv, "ncclRecv");
  lib.resolve(n.ncclGroupStart, "ncclGroupStart");
  lib.resolve(n.ncclGroupEnd, "ncclGroupEnd");
  lib.resolve(n.ncclRedOpCreatePreMulSum, "ncclRedOpCreatePreMulSum");
  lib.resolve(n.ncclRedOpDestroy, "ncclRedOpDestroy");
}

// Checks an opened library: every function, and the version. Empty when
// usable, else why not.
std::string accept(SharedLibrary& lib, NcclLibrary& n) {
  resolve_all(lib, n);
  if (!lib.missing().empty()) return "NCCL library " + lib.file() + " lacks " + lib.missing_text();
  if (n.ncclGetVersion(&n.version) != ncclSuccess) return "NCCL library " + lib.file() + ": ncclGetVersion failed";
  if (n.version < kMinNcclVersion)
    return "NCCL library " + lib.file() + " is version " + nccl_version_text(n.version) + "; ring needs " +
           nccl_version_text(kMinNcclVersion) + " or newer (set RING_NCCL_LIBRARY to a newer libnccl.so.2)";
  return "";
}

// Tries one candidate; true when the search should stop (loaded, or a
// library was found but refused).
bool try_open(NcclLibrary& n, const std::string& path, const char* source, bool no_load) {
  SharedLibrary lib(path, no_load);
  if (!lib.ok()) return false;
  NcclLibrary found;
  const std::string why = accept(lib, found);
  if (!why.empty()) {
    n.error = why;
    return true;
  }
  found.loaded = true;
  found.path = lib.file();
  found.source = source;
  lib.release();
  n = found;
  return true;
}

NcclLibrary load(const std::vector<std::string>& wheel_paths) {
  NcclLibrary n;
  const char* env = std::getenv("RING_NCCL_LIBRARY");
  if (env && *env) {
    SharedLibrary probe(env);
    if (!probe.ok()) {
      n.error = std::string("RING_NCCL_LIBRARY=") + env + " cannot be loaded: " + probe.error();
      return n;
    }
    try_open(n, env, "RING_NCCL_LIBRARY", false);
    return n;
  }
  if (try_open(n, kSoname, "already loaded", true)) return n;
  for (const auto& p : wheel_paths)
    if (try_open(n, p, "wheel", false)) return n;
  if (try_open(n, kSoname, "default path", false)) return n;
  SharedLibrary missing(kSoname);
  n.error = "no NCCL library found (RING_NCCL_LIBRARY unset, none loaded, no nvidia-nccl wheel, " +
            std::string(kSoname) + ": " + missing.error() + ")";
  return n;
}

}  // namespace

std::string nccl_version_text(int code) {
  if (code < 10000)  // before 2.9: 1000 * major + 100 * minor + patch
    return std::to_string(code / 1000) + "." + std::to_string(code / 100 % 10) + "." + std::to_string(code % 100);
  return std::to_string(code / 10000) + "." + std::to_string(code / 100 % 100) + "." + std::to_string(code % 100);
}

const NcclLibrary& nccl_library(const std::vector<std::string>& wheel_paths) {
  static const NcclLibrary library = load(wheel_paths);
  return library;
}

namespace {
std::atomic<double> g_wait_limit{30.0};
}  // namespace

void set_nccl_wait_limit(double seconds) { g_wait_limit.store(seconds); }
double nccl_wait_limit() { return g_wait_limit.load(); }

void nccl_check(ncclResult_t rc, const char* what, ncclComm_t comm) {
  if (rc != ncclInProgress || !comm) return nccl_check(rc, what);
  const NcclLibrary& n = nccl_library();
  const auto start = std::chrono::steady_clock::now();
  while (rc == ncclInProgress) {
    const std::chrono::duration<double> waited = std::chrono::steady_clock::now() - start;
    if (waited.count() > nccl_wait_limit())
      throw_error(ErrorKind::PeerFailure, std::string(what) + ": NCCL did not finish queueing it within " +
                                              std::to_string(static_cast<int>(nccl_wait_limit())) +
                                              " s (RING_TIMEOUT_SECONDS); a peer may be gone");
    std::this_thread::yield();
    if (n.ncclCommGetAsyncError(comm, &rc) != ncclSuccess) rc = ncclInProgress;
  }
  constexpr ncclResult_t kSystemError = 2, kRemoteError = 6;
  if (rc == kSystemError || rc == kRemoteError)
    throw_error(ErrorKind::PeerFailure, std::string(what) + ": NCCL error " + std::to_string(rc) + " (" +
                                            n.ncclGetErrorString(rc) + ")");
  nccl_check(rc, what);
}

void nccl_check(ncclResult_t rc, const char* what) {
  if (rc == ncclSuccess) return;
  const NcclLibrary& n = nccl_library();
  const char* text = n.ncclGetErrorString ? n.ncclGetErrorString(rc) : nullptr;
  throw_error(ErrorKind::Internal, std::string(what) + ": NCCL error " + std::to_string(rc) +
                                       (text ? std::string(" (") + text + ")" : std::string()));
}

}  // namespace ring::gpu
