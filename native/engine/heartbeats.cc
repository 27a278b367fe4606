#include "engine/heartbeats.h"

#include <sstream>

#include "common/error.h"

namespace ring {

Heartbeats::Heartbeats(Mesh* control, std::vector<int> peers, double timeout_s)
    : control_(control),
      peers_(std::move(peers)),
      heard_(static_cast<size_t>(control->size()), Clock::now()),
      timeout_(timeout_s),
      interval_(timeout_s / 3.0),
      next_send_(Clock::now()) {}

std::vector<int> Heartbeats::watched_peers(const Mesh& control) {
  std::vector<int> peers;
  for (int r = 0; r < control.size(); ++r) {
    if (r == control.rank() || (control.rank() != 0 && r != 0)) continue;
    if (control.is_socket(r)) peers.push_back(r);
  }
  return peers;
}

void Heartbeats::send_due() {
  if (peers_.empty()) return;
  Clock::time_point now = Clock::now();
  if (now < next_send_) return;
  next_send_ = now + std::chrono::duration_cast<Clock::duration>(interval_);
  static const std::vector<uint8_t> kEmpty;
  for (int peer : peers_) control_->send_msg(peer, kEmpty);
}

void Heartbeats::heard(int peer) {
  if (!peers_.empty()) heard_[static_cast<size_t>(peer)] = Clock::now();  // no clock on one host
}

void Heartbeats::check() const {
  Clock::time_point now = Clock::now();
  for (int peer : peers_) {
    std::chrono::duration<double> silent = now - heard_[static_cast<size_t>(peer)];
    if (silent <= timeout_) continue;
    std::ostringstream os;
    os << "lost " << control_->peer_name(peer) << ": it sent nothing for " << static_cast<int>(silent.count())
       << " s (RING_TIMEOUT_SECONDS " << timeout_.count() << "): its process is stopped or hung, or its host "
       << "does not answer";
    throw_error(ErrorKind::PeerFailure, os.str());
  }
}

}  // namespace ring
