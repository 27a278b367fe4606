// NCCL communicators, one per (group, GPU, engine stream index),
// created the first time a response needs one, over the process set's CPU
// mesh: the set's rank 0 makes the unique id and broadcasts it, then every
// rank joins on its own GPU, for at most RING_TIMEOUT_SECONDS: with a
// non-blocking ncclCommInitRankConfig polled for its state (NCCL 2.14 and
// later), else ncclCommInitRank on a thread of its own that is given up
// on. A rank lost or stuck meanwhile makes every rank's get() throw
// PeerFailure instead of hanging. After the init the ranks agree over the
// mesh (a minimum, which is also the barrier Horovod has after creating
// one) that every one of them has its communicator.
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
#include <utility>
#include <vector>

#include "gpu/nccl.h"
#include "transport/mesh.h"

namespace ring::gpu {

class NcclCommunicators {
 public:
  // `timeout_seconds`: how long a communicator's creation may take.
  explicit NcclCommunicators(double timeout_seconds) : timeout_seconds_(timeout_seconds) {}
  NcclCommunicators(const NcclCommunicators&) = delete;
  NcclCommunicators& operator=(const NcclCommunicators&) = delete;
  // Gives back every communicator left (destroy()). Never throws.
  ~NcclCommunicators();

  // A group is a set of ranks with a CPU mesh, named by `group`: a process
  // set's ProcessSet::serial (never reused, unlike its id), or a negative
  // key the backend chooses for a subgroup of its own.
  // True when every rank of `group`'s `mesh` has NCCL (asked of the mesh
  // once per group; collective).
  bool usable(int64_t group, Mesh& mesh);
  // The communicator of (group, device, stream index); collective the first
  // time. Throws RingError: PeerFailure when a rank did not join in time.
  ncclComm_t get(int64_t group, Mesh& mesh, int device, int stream_index);
  // Aborts every communicator (a peer was lost): NCCL kernels waiting for
  // it return. Any thread; later get() calls throw.
  void abort_all();
  // The communicators of `group` (a removed process set) are taken out of
  // use; destroy_retired() destroys them. Any thread.
  void retire(int64_t group);
  // Destroys each retired communicator for which `idle` (ncclComm_t) is
  // true; the others stay retired. The engine's thread.
  template <class Idle>
  void destroy_retired(Idle idle);

 private:
  // Horovod's commDestroyOrAbort: ncclCommDestroy for a healthy
  // communicator, ncclCommAbort for one with an asynchronous error (whose
  // destroy would wait for work that never ends); nothing when NCCL cannot
  // say. Never throws (the driver may be gone at interpreter exit).
  static void destroy(int device, ncclComm_t comm) noexcept;
  // Joins the communicator `id` names as this rank of `mesh`, on the
  // current device, within timeout_seconds_. Throws RingError.
  ncclComm_t create(Mesh& mesh, const ncclUniqueId& id, int device);
  ncclComm_t create_nonblocking(Mesh& mesh, const ncclUniqueId& id);
  ncclComm_t create_watched(Mesh& mesh, const ncclUniqueId& id, int device);
  // Throws when the creation must stop waiting: abort_all() was called, a
  // peer of `mesh` is known dead, or `waited` exceeds the limit.
  void check_creation(Mesh& mesh, double waited);
  // Moves the communicators of every group `which` (int64_t) picks from
  // comms_ to retired_; mu_ is held (or no other thread is left).
  template <class Which>
  void retire_locked(Which which);

  double timeout_seconds_;
  std::map<int64_t, bool> usable_;  // engine thread only
  std::mutex mu_;                   // guards comms_ and aborted_ (never held across an NCCL call that waits)
  std::map<std::tuple<int64_t, int, int>, ncclComm_t> comms_;
  bool aborted_ = false;
  std::vector<std::pair<int, ncclComm_t>> retired_;  // (device, comm); guarded by mu_
};

template <class Which>
void NcclCommunicators::retire_locked(Which which) {
  for (auto it = comms_.begin(); it != comms_.end();) {
    if (which(std::get<0>(it->first))) {
      retired_.emplace_back(std::get<1>(it->first), it->second);
      it = comms_.erase(it);
    } else {
      ++it;
    }
  }
}

template <class Idle>
void NcclCommunicators::destroy_retired(Idle idle) {
  std::vector<std::pair<int, ncclComm_t>> now;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = retired_.begin(); it != retired_.end();) {
      if (idle(it->second)) {
        now.push_back(*it);
        it = retired_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (const auto& [device, comm] : now) destroy(device, comm);
}

}  // namespace ring::gpu
