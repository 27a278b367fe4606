#include "engine/backends/gpu/nccl_comms.h"

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <thread>

#include "collectives/collectives.h"
#include "collectives/slices.h"
#include "common/error.h"
#include "engine/backends/gpu/gpu_wait.h"

namespace ring::gpu {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// How often a creation in progress looks at its state, and at its peers.
constexpr auto kCreationPoll = std::chrono::milliseconds(1);

// A blocking ncclCommInitRank run on a thread of its own (NCCL before
// 2.14): the engine waits for it with a limit and gives up on it after;
// the thread then aborts the communicator should it ever come.
struct WatchedInit {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false, abandoned = false;  // guarded by mu
  ncclResult_t rc = ncclSuccess;
  ncclComm_t comm = nullptr;
};

}  // namespace

NcclCommunicators::~NcclCommunicators() {
  // None left after abort_all(); none at all in a job without NCCL.
  retire_locked([](int64_t) { return true; });
  for (auto& [device, comm] : retired_) destroy(device, comm);
}

void NcclCommunicators::destroy(int device, ncclComm_t comm) noexcept {
  ScopedDevice current(device, std::nothrow);
  if (!current.ok()) return;  // the driver is gone: nothing can be given back
  const NcclLibrary& n = nccl_library();
  ncclResult_t async = ncclSuccess;
  if (n.ncclCommGetAsyncError(comm, &async) != ncclSuccess) return;
  if (async == ncclSuccess)
    n.ncclCommDestroy(comm);
  else
    n.ncclCommAbort(comm);
}

void NcclCommunicators::retire(int64_t group) {
  std::lock_guard<std::mutex> lock(mu_);
  retire_locked([group](int64_t g) { return g == group; });
}

bool NcclCommunicators::usable(int64_t group, Mesh& mesh) {
  auto it = usable_.find(group);
  if (it != usable_.end()) return it->second;
  int32_t mine = nccl_library().loaded ? 1 : 0, all = 0;
  ring_allreduce(mesh, &mine, &all, slice_counts(1, mesh.size()), DataType::Int32, ReduceOp::Min, 1.0);
  return usable_[group] = all == 1;
}

void NcclCommunicators::check_creation(Mesh& mesh, double waited) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_) throw_error(ErrorKind::Internal, "the job's NCCL communicators were aborted after a failure");
  }
  for (int r = 0; r < mesh.size(); ++r)
    if (r != mesh.rank()) mesh.check_alive(r);
  if (waited > timeout_seconds_)
    throw_error(ErrorKind::PeerFailure, "an NCCL communicator of " + std::to_string(mesh.size()) +
                                            " ranks was not created within " +
                                            std::to_string(static_cast<int>(timeout_seconds_)) +
                                            " s (RING_TIMEOUT_SECONDS): a rank did not join (lost or stuck)");
}

ncclComm_t NcclCommunicators::create_nonblocking(Mesh& mesh, const ncclUniqueId& id) {
  const NcclLibrary& n = nccl_library();
  ncclConfig_t config;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  ncclResult_t rc = n.ncclCommInitRankConfig(&comm, mesh.size(), id, mesh.rank(), &config);
  const auto start = Clock::now();
  try {
    while (rc == ncclInProgress) {
      check_creation(mesh, seconds_since(start));
      std::this_thread::sleep_for(kCreationPoll);
      if (n.ncclCommGetAsyncError(comm, &rc) != ncclSuccess) rc = ncclInProgress;
    }
    if (rc != ncclSuccess)
      throw_error(nccl_error_kind(rc), std::string("ncclCommInitRankConfig: NCCL error ") + std::to_string(rc) + " (" +
                                           n.ncclGetErrorString(rc) + ")");
  } catch (const RingError&) {
    if (comm) n.ncclCommAbort(comm);
    throw;
  }
  return comm;
}

ncclComm_t NcclCommunicators::create_watched(Mesh& mesh, const ncclUniqueId& id, int device) {
  auto init = std::make_shared<WatchedInit>();
  std::thread([init, device, id, size = mesh.size(), rank = mesh.rank()] {
    ScopedDevice current(device, std::nothrow);
    ncclComm_t comm = nullptr;
    const ncclResult_t rc = nccl_library().ncclCommInitRank(&comm, size, id, rank);
    std::lock_guard<std::mutex> lock(init->mu);
    init->done = true;
    init->rc = rc;
    init->comm = comm;
    if (init->abandoned && rc == ncclSuccess) nccl_library().ncclCommAbort(comm);
    init->cv.notify_all();
  }).detach();
  const auto start = Clock::now();
  std::unique_lock<std::mutex> lock(init->mu);
  while (!init->cv.wait_for(lock, kCreationPoll, [&] { return init->done; })) {
    lock.unlock();
    try {
      check_creation(mesh, seconds_since(start));
    } catch (const RingError&) {
      lock.lock();
      init->abandoned = true;
      if (init->done && init->rc == ncclSuccess) nccl_library().ncclCommAbort(init->comm);
      throw;
    }
    lock.lock();
  }
  nccl_check(init->rc, "ncclCommInitRank");
  return init->comm;
}

ncclComm_t NcclCommunicators::create(Mesh& mesh, const ncclUniqueId& id, int device) {
  ncclComm_t comm = nullptr;
  ErrorKind kind = ErrorKind::PeerFailure;
  std::string why;
  try {
    comm = nccl_library().ncclCommInitRankConfig ? create_nonblocking(mesh, id) : create_watched(mesh, id, device);
  } catch (const RingError& e) {
    kind = e.kind();
    why = e.what();
  }
  // Every rank says whether it has its communicator: the barrier after the
  // creation, and no rank goes on to use a communicator another lacks.
  int32_t mine = comm ? 1 : 0, all = 0;
  try {
    ring_allreduce(mesh, &mine, &all, slice_counts(1, mesh.size()), DataType::Int32, ReduceOp::Min, 1.0);
  } catch (const RingError&) {
    if (comm) nccl_library().ncclCommAbort(comm);
    throw;
  }
  if (!why.empty()) throw_error(kind, why);
  if (all != 1) {
    nccl_library().ncclCommAbort(comm);
    throw_error(ErrorKind::PeerFailure, "another rank could not create its NCCL communicator");
  }
  return comm;
}

ncclComm_t NcclCommunicators::get(int64_t group, Mesh& mesh, int device, int stream_index) {
  const auto key = std::make_tuple(group, device, stream_index);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_) throw_error(ErrorKind::Internal, "the job's NCCL communicators were aborted after a failure");
    auto it = comms_.find(key);
    if (it != comms_.end()) return it->second;
  }
  const NcclLibrary& n = nccl_library();
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  if (mesh.rank() == 0) nccl_check(n.ncclGetUniqueId(&id), "ncclGetUniqueId");
  broadcast(mesh, &id, sizeof(id), 0);
  ScopedDevice current(device);
  ncclComm_t comm = create(mesh, id, device);
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_) {
    n.ncclCommAbort(comm);
    throw_error(ErrorKind::Internal, "the job's NCCL communicators were aborted after a failure");
  }
  comms_[key] = comm;
  return comm;
}

void NcclCommunicators::abort_all() {
  std::lock_guard<std::mutex> lock(mu_);
  aborted_ = true;
  retire_locked([](int64_t) { return true; });
  for (auto& [device, comm] : retired_) {  // none when NCCL was never used: it is not loaded now
    ScopedDevice current(device, std::nothrow);
    nccl_library().ncclCommAbort(comm);
  }
  retired_.clear();
}

}  // namespace ring::gpu
