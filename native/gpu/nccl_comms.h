// NCCL communicators, one per (process set, GPU, engine stream index),
// created the first time a response needs one, over the process set's CPU
// mesh: the set's rank 0 makes the unique id and broadcasts it, then every
// rank joins with ncclCommInitRank on its own GPU.
//
// Before a set's first communicator its ranks agree (a minimum over the
// mesh) on whether every one of them loaded NCCL; when one has not, the
// set's GPU operations run host-staged on every rank. Both steps are
// collectives on the mesh: every rank of the set reaches them in the same
// response, because every rank runs the same responses in the same order
// and decides from the response alone.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>

#include "gpu/nccl.h"
#include "transport/mesh.h"

namespace ring::gpu {

class NcclCommunicators {
 public:
  NcclCommunicators() = default;
  NcclCommunicators(const NcclCommunicators&) = delete;
  NcclCommunicators& operator=(const NcclCommunicators&) = delete;
  // Destroys every communicator (aborts them after abort_all()).
  ~NcclCommunicators();

  // True when every rank of set `set_id`'s `mesh` has NCCL (asked of the
  // mesh once per set; collective).
  bool usable(int32_t set_id, Mesh& mesh);
  // The communicator of (set, device, stream index); collective the first time.
  ncclComm_t get(int32_t set_id, Mesh& mesh, int device, int stream_index);
  // Aborts every communicator (a peer was lost): NCCL kernels waiting for
  // it return. Any thread; later get() calls throw.
  void abort_all();

 private:
  std::map<int32_t, bool> usable_;  // engine thread only
  std::mutex mu_;                   // guards comms_ and aborted_ (never held across an NCCL call that waits)
  std::map<std::tuple<int32_t, int, int>, ncclComm_t> comms_;
  bool aborted_ = false;
};

}  // namespace ring::gpu
