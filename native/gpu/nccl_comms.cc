#include "gpu/nccl_comms.h"

#include <cstring>

#include "collectives/collectives.h"
#include "collectives/slices.h"

namespace ring::gpu {

NcclCommunicators::~NcclCommunicators() {
  const NcclLibrary& n = nccl_library();
  for (auto& [key, comm] : comms_) {
    ScopedDevice current(std::get<1>(key));
    if (aborted_)
      n.ncclCommAbort(comm);
    else
      n.ncclCommDestroy(comm);
  }
}

bool NcclCommunicators::usable(int32_t set_id, Mesh& mesh) {
  auto it = usable_.find(set_id);
  if (it != usable_.end()) return it->second;
  int32_t mine = nccl_library().loaded ? 1 : 0, all = 0;
  ring_allreduce(mesh, &mine, &all, slice_counts(1, mesh.size()), DataType::Int32, ReduceOp::Min, 1.0);
  return usable_[set_id] = all == 1;
}

ncclComm_t NcclCommunicators::get(int32_t set_id, Mesh& mesh, int device, int stream_index) {
  const auto key = std::make_tuple(set_id, device, stream_index);
  auto it = comms_.find(key);
  if (it != comms_.end()) return it->second;
  const NcclLibrary& n = nccl_library();
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  if (mesh.rank() == 0) nccl_check(n.ncclGetUniqueId(&id), "ncclGetUniqueId");
  broadcast(mesh, &id, sizeof(id), 0);
  ncclComm_t comm = nullptr;
  ScopedDevice current(device);
  nccl_check(n.ncclCommInitRank(&comm, mesh.size(), id, mesh.rank()), "ncclCommInitRank");
  comms_[key] = comm;
  return comm;
}

void NcclCommunicators::abort_all() { aborted_ = true; }

}  // namespace ring::gpu
