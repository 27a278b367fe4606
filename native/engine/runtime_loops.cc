// The background thread's two loops.
//
// Worker (rank > 0): moves new queue entries into a RequestList and sends it
// to rank 0 (at most one unacknowledged list in flight, each small, so a
// send never waits on a coordinator busy in a collective); executes every
// ResponseList that arrives.
// Coordinator (rank 0): feeds its own entries and every worker's
// RequestLists to the Coordinator; whenever something is ready (or a worker
// needs its acknowledgement) sends the ResponseList to every worker and
// executes it.
// Both wait with Backoff when idle, so an idle job costs almost no CPU and a
// busy one reacts within microseconds.
#include <algorithm>
#include <chrono>

#include "common/error.h"
#include "engine/coordinator.h"
#include "engine/runtime.h"
#include "transport/waiter.h"

namespace ring {
namespace {

constexpr size_t kMaxRequestListBytes = 48 << 10;
constexpr size_t kMaxControlMessage = 64u << 20;
constexpr double kIdleLivenessSeconds = 0.1;
// A rank with nothing in flight sleeps on the queue's condition variable
// this long at most (then checks its peers), so an idle job costs nothing.
constexpr double kQuietWaitSeconds = 0.002;

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

size_t estimate_bytes(const Request& q) { return 64 + q.name.size() + 8 * (q.shape.size() + q.splits.size()); }

}  // namespace

void Runtime::idle_wait(Backoff& backoff, bool quiet) {
  if (quiet) queue_.wait_new(kQuietWaitSeconds);
  else backoff.wait();
}

void Runtime::loop() {
  try {
    if (opts_.rank == 0) coordinator_loop();
    else worker_loop();
  } catch (const RingError& e) {
    stop(e.kind(), e.what());
  } catch (const std::exception& e) {
    stop(ErrorKind::Internal, std::string("background thread failed: ") + e.what());
  }
  // Closing tells peers still waiting on us that we are gone.
  data_->close();
  control_->close();
}

std::vector<Entry> Runtime::take_fresh() {
  std::vector<Entry> fresh = queue_.take_all();
  for (auto& e : fresh) {
    pending_.emplace(e.req.name, e);
    if (e.req.op == OpType::Join) executor_->set_joined(true);
  }
  return fresh;
}

RequestList Runtime::request_list(std::vector<Entry>& unsent) {
  RequestList list;
  size_t bytes = 0, used = 0;
  for (; used < unsent.size() && bytes < kMaxRequestListBytes; ++used) {
    const Request& q = unsent[used].req;
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
    bytes += estimate_bytes(q);
  }
  unsent.erase(unsent.begin(), unsent.begin() + static_cast<long>(used));
  return list;
}

void Runtime::execute(const ResponseList& list) {
  // The coordinator filled its cache while building the list.
  if (opts_.rank != 0) {
    for (const auto& put : list.cache_puts) {
      cache_.put(put.name, put.id);
      auto it = pending_.find(put.name);
      if (it != pending_.end()) cache_.set_signature(put.id, opts_.rank, it->second.req);
    }
  }
  for (const auto& r : list.responses) executor_->run(r, pending_);
}

void Runtime::worker_loop() {
  std::vector<Entry> unsent;
  int64_t sent = 0, acked = 0;
  bool shutdown_sent = false;
  Backoff backoff;
  Clock::time_point last_check = Clock::now();
  auto name_of = [this](const ResponseList& l, uint32_t id) -> std::string {
    for (const auto& p : l.cache_puts)
      if (p.id == id) return p.name;
    return cache_.name_of(id);
  };
  while (true) {
    bool progress = false;
    while (control_->readable(0)) {
      ResponseList list = ResponseList::decode(control_->recv_msg(0, kMaxControlMessage), name_of);
      acked = list.acked;
      execute(list);
      progress = true;
      if (list.shutdown) {
        stop(ErrorKind::Shutdown, "ring has been shut down (" + list.shutdown_reason + ")");
        return;
      }
    }
    if (queue_.has_new()) {
      std::vector<Entry> fresh = take_fresh();
      unsent.insert(unsent.end(), fresh.begin(), fresh.end());
    }
    bool want_shutdown = shutdown_requested_.load() && !shutdown_sent && unsent.empty();
    if (sent == acked && (!unsent.empty() || want_shutdown)) {
      RequestList list = request_list(unsent);
      list.shutdown = want_shutdown;
      control_->send_msg(0, list.encode());
      ++sent;
      shutdown_sent |= want_shutdown;
      progress = true;
    }
    if (progress) {
      backoff.reset();
      continue;
    }
    idle_wait(backoff, pending_.empty() && unsent.empty());
    if (seconds_since(last_check) > kIdleLivenessSeconds) {
      last_check = Clock::now();
      control_->check_alive(0);
    }
  }
}

void Runtime::coordinator_loop() {
  const int n = opts_.size;
  Coordinator coord(n, &cache_, config_.fusion_threshold_bytes);
  std::vector<int64_t> received(n, 0), acked(n, 0);
  bool shutdown_noted = false;
  Backoff backoff;
  Clock::time_point last_check = Clock::now();
  Clock::time_point first_ready{};
  bool batching = false;
  const double cycle_s = config_.cycle_time_ms / 1000.0;
  auto id_of = [this](const std::string& name) { return cache_.id_of(name); };
  while (true) {
    bool progress = false;
    if (queue_.has_new()) {
      for (auto& e : take_fresh()) coord.add_request(0, e.req);
      progress = true;
    }
    if (shutdown_requested_.load() && !shutdown_noted) {
      coord.request_shutdown(0);
      shutdown_noted = progress = true;
    }
    for (int w = 1; w < n; ++w) {
      if (!control_->readable(w)) continue;
      coord.add(w, RequestList::decode(control_->recv_msg(w, kMaxControlMessage)));
      ++received[w];
      progress = true;
    }
    bool need_ack = false;
    for (int w = 1; w < n; ++w) need_ack |= received[w] != acked[w];
    // Gather a batch while its tensors are still arriving, at most one cycle.
    if (coord.has_work() && !batching) {
      batching = true;
      first_ready = Clock::now();
    }
    bool emit = coord.has_work() && !(coord.worth_waiting() && seconds_since(first_ready) < cycle_s);
    if (emit || need_ack) {
      ResponseList list = emit ? coord.take() : ResponseList{};
      batching = batching && !emit;
      bool has_responses = !list.responses.empty() || list.shutdown || !list.cache_puts.empty();
      for (int w = 1; w < n; ++w) {
        if (!has_responses && received[w] == acked[w]) continue;
        list.acked = acked[w] = received[w];
        control_->send_msg(w, list.encode(id_of));
      }
      execute(list);
      if (list.shutdown) {
        stop(ErrorKind::Shutdown, "ring has been shut down (" + list.shutdown_reason + ")");
        return;
      }
      progress = true;
    }
    if (progress) {
      backoff.reset();
      continue;
    }
    idle_wait(backoff, pending_.empty());
    if (seconds_since(last_check) > kIdleLivenessSeconds) {
      last_check = Clock::now();
      for (int w = 1; w < n; ++w) control_->check_alive(w);
    }
  }
}

}  // namespace ring
