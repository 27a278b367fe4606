#include "gpu/nccl_comms.h"

#include <cstring>

#include "common/error.h"

#include "collectives/collectives.h"
#include "collectives/slices.h"

namespace ring::gpu {

NcclCommunicators::~NcclCommunicators() {
  // None left after abort_all(); none at all in a job without NCCL.
  retire_locked([](int64_t) { return true; });
  for (auto& [device, comm] : retired_) destroy(device, comm);
}

void NcclCommunicators::destroy(int device, ncclComm_t comm) {
  ScopedDevice current(device);
  nccl_library().ncclCommDestroy(comm);
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
  ncclComm_t comm = nullptr;
  ScopedDevice current(device);
  nccl_check(n.ncclCommInitRank(&comm, mesh.size(), id, mesh.rank()), "ncclCommInitRank");
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
    ScopedDevice current(device);
    nccl_library().ncclCommAbort(comm);
  }
  retired_.clear();
}

}  // namespace ring::gpu
