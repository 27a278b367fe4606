// Heartbeats on the control mesh, for peers behind TCP channels (other
// hosts, or RING_TRANSPORT=tcp).
//
// A TCP connection does not show a peer whose process is stopped (SIGSTOP,
// a debugger) or hung: its kernel still acknowledges. While every rank waits
// (for a tensor one of them has not submitted yet, say) nothing else flows,
// so such a peer would be waited for forever. Every rank therefore sends an
// empty control message to each watched peer every third of the timeout,
// also while it executes long operations (the Runtime calls send_due() from
// the data mesh's tick), and a watched peer heard nothing from for the
// timeout is lost: check() throws RingError(PeerFailure) naming it. Receivers
// skip empty control messages (Mesh::recv_msg returns them as empty).
#pragma once

#include <chrono>
#include <vector>

#include "transport/mesh.h"

namespace ring {

class Heartbeats {
 public:
  // Watches `peers` of `control` (ranks of that mesh) with `timeout_s`.
  Heartbeats(Mesh* control, std::vector<int> peers, double timeout_s);

  // The ranks to watch from `rank`: on rank 0 every worker, on a worker rank
  // 0, each only when its control channel is TCP.
  static std::vector<int> watched_peers(const Mesh& control);

  // Sends a heartbeat to every watched peer when a third of the timeout
  // has passed since the last; cheap when none is due.
  void send_due();
  // Something (a message or a heartbeat) came from `peer` (noted only when
  // some peer is watched).
  void heard(int peer);
  // Throws RingError(PeerFailure) for a watched peer heard nothing from for
  // the timeout. Call it after reading what the peers sent.
  void check() const;

 private:
  using Clock = std::chrono::steady_clock;
  Mesh* control_;
  std::vector<int> peers_;
  std::vector<Clock::time_point> heard_;  // by rank of the mesh
  std::chrono::duration<double> timeout_, interval_;
  Clock::time_point next_send_;
};

}  // namespace ring
