// A worker's progress step (rank > 0): moves new queue entries into a
// RequestList and sends it to rank 0, at most one unacknowledged list in
// flight and each small, so a send never waits on a coordinator busy in a
// collective; executes every ResponseList that arrives, in order.
#include "common/error.h"
#include "engine/runtime.h"

namespace ring {
namespace {

// A RequestList stops growing at this many bytes (the rest waits for the next).
constexpr size_t kMaxRequestListBytes = 48 << 10;

}  // namespace

RequestList Runtime::request_list(std::vector<Request>& unsent) {
  RequestList list;
  size_t bytes = 0, used = 0;
  for (; used < unsent.size() && bytes < kMaxRequestListBytes; ++used) {
    const Request& q = unsent[used];
    int64_t id = cache_.id_of(q.name);
    if (id >= 0) {
      const Request* sig = cache_.signature(static_cast<uint32_t>(id), opts_.rank);
      if (sig && *sig == q) {
        size_t byte = static_cast<size_t>(id) / 8;
        if (list.cache_bits.size() <= byte) list.cache_bits.resize(byte + 1, 0);
        list.cache_bits[byte] |= static_cast<uint8_t>(1u << (id % 8));
        continue;
      }
      cache_.set_signature(static_cast<uint32_t>(id), opts_.rank, q);
    }
    list.requests.push_back(q);
    bytes += q.encoded_bytes();
  }
  unsent.erase(unsent.begin(), unsent.begin() + static_cast<long>(used));
  return list;
}

bool Runtime::worker_step() {
  LoopState& s = loop_;
  bool progress = false;
  auto name_of = [this](const ResponseList& l, uint32_t id) { return cached_name(l, id); };
  s.heartbeats->send_due();
  while (control_->readable(0)) {
    s.heartbeats->heard(0);
    std::vector<uint8_t> msg = control_->recv_msg(0, kMaxControlMessage);
    if (msg.empty()) continue;  // a heartbeat
    if (FastMessage::is_fast(msg)) {
      fast_->receive(0, std::move(msg));
      progress = true;
      continue;
    }
    ResponseList list = ResponseList::decode(msg, name_of);
    s.acked = list.acked;
    execute(list);
    progress = true;
    if (list.shutdown) {
      end_by_list(list);
      return true;
    }
  }
  fast_->poll();
  auto to_rank0 = [&](const Request& q) { s.unsent.push_back(q); };
  if (queue_.has_new()) take_fresh(to_rank0);
  progress |= fast_step(to_rank0);
  bool want_shutdown = shutdown_requested_.load() && !s.shutdown_sent && s.unsent.empty();
  if (s.sent == s.acked && (!s.unsent.empty() || want_shutdown)) {
    RequestList list = request_list(s.unsent);
    list.shutdown = want_shutdown;
    control_->send_msg(0, list.encode());
    ++s.sent;
    s.shutdown_sent |= want_shutdown;
    progress = true;
  }
  if (liveness_due(progress)) {
    control_->check_alive(0);
    s.heartbeats->check();
  }
  return progress;
}

}  // namespace ring
