// The progress loop: one step() at a time, by the background thread or by a
// caller waiting for its operation (see Runtime::wait).
//
// Worker (rank > 0): moves new queue entries into a RequestList and sends it
// to rank 0 (at most one unacknowledged list in flight, each small, so a
// send never waits on a coordinator busy in a collective); executes every
// ResponseList that arrives.
// Coordinator (rank 0): feeds its own entries and every worker's
// RequestLists to the Coordinator; whenever something is ready (or a worker
// needs its acknowledgement) sends the ResponseList to every worker and
// executes it.
// The background thread waits with Backoff when idle, so an idle job costs
// almost no CPU and a busy one reacts within microseconds. A caller in
// wait() steps itself while progress comes quickly and hands back to the
// background thread (waking it) when it stops, so no work is left waiting.
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
// A waiting caller stops stepping after this long without progress (a peer
// that is still computing) and sleeps until its operation is done.
constexpr double kDriveIdleSeconds = 0.002;
// The background thread stays awake this long after its last progress.
constexpr double kLingerSeconds = 100e-6;
// Allreduces of at least this size run alone instead of fused.
constexpr size_t kAloneBytesOneHost = 128 << 10;
constexpr size_t kAloneBytesSeveralHosts = 1 << 20;

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace

void Runtime::loop() {
  Backoff backoff;
  while (true) {
    bool progress = false, idle_here = false;
    {
      std::unique_lock<std::mutex> lock(progress_mu_, std::try_to_lock);
      if (lock.owns_lock()) {
        if (loop_.finished) break;
        progress = step();
        idle_here = quiet();
      } else {
        idle_here = true;  // a caller is stepping; it wakes us when it stops
      }
    }
    if (progress) {
      backoff.reset();
      continue;
    }
    // Quiet: linger a little (a burst of asynchronous submissions then finds
    // us awake, with no wake-up per entry), then sleep on the queue.
    if (idle_here && backoff.idle_seconds() >= kLingerSeconds) queue_.wait_new(kQuietWaitSeconds);
    else backoff.wait();
  }
  // Closing tells peers still waiting on us that we are gone.
  data_->close();
  control_->close();
}

bool Runtime::wait(int64_t handle, double timeout_s) {
  if (timeout_s < 0 && !handles_.poll(handle)) drive(handle);
  return handles_.wait(handle, timeout_s);
}

void Runtime::drive(int64_t handle) {
  Backoff backoff;
  bool done = false, left = false;
  while (!(done = handles_.poll(handle)) && backoff.idle_seconds() < kDriveIdleSeconds) {
    std::unique_lock<std::mutex> lock(progress_mu_, std::try_to_lock);
    if (lock.owns_lock() && !loop_.finished) {
      bool progress = step();
      left = !quiet();
      if (progress) {
        backoff.reset();
        continue;
      }
    }
    lock = {};
    backoff.wait();
  }
  // The background thread may be asleep on the queue (entries queued with
  // wake = false, or it found us stepping): wake it for what is in flight.
  if (!done || left) queue_.notify();
}

bool Runtime::step() {
  if (loop_.finished) return false;
  try {
    return opts_.rank == 0 ? coordinator_step() : worker_step();
  } catch (const RingError& e) {
    end(e.kind(), e.what());
  } catch (const std::exception& e) {
    end(ErrorKind::Internal, std::string("background thread failed: ") + e.what());
  }
  return true;
}

void Runtime::end(ErrorKind kind, const std::string& reason, bool from_peer, bool quiet) {
  loop_.finished = true;
  std::string why = reason;
  if (kind != ErrorKind::Shutdown) {
    std::optional<ResponseList> orderly;
    if (!from_peer && peer_note(&kind, &why, &orderly) && orderly) {
      // Rank 0 had sent an orderly shutdown before it closed: end as if
      // that list had been read first (the closed connection won the race).
      end_by_list(*orderly);
      return;
    }
    why += unfinished_names();  // what this rank loses, whoever saw the cause
    if (!from_peer) tell_peers(kind, why);
  }
  stop(kind, why, quiet);
  queue_.notify();  // the background thread closes the meshes
}

bool Runtime::peer_note(ErrorKind* kind, std::string* reason, std::optional<ResponseList>* orderly) {
  auto no_names = [](const ResponseList&, uint32_t) -> std::string { return ""; };
  for (int peer = 0; peer < opts_.size; ++peer) {
    if (peer == opts_.rank || (opts_.rank != 0 && peer != 0)) continue;
    try {
      while (control_->readable(peer)) {
        std::vector<uint8_t> msg = control_->recv_msg(peer, kMaxControlMessage);
        if (opts_.rank == 0) {
          RequestList note = RequestList::decode(msg);
          if (!note.abort) continue;
          *kind = note.abort_kind;
          *reason = note.abort_reason;
        } else {
          ResponseList note = ResponseList::decode(msg, no_names);
          if (!note.shutdown) continue;
          if (note.shutdown_kind == ErrorKind::Shutdown) {
            *orderly = std::move(note);
            return true;
          }
          *kind = note.shutdown_kind;
          *reason = note.shutdown_reason;
        }
        return true;
      }
    } catch (const std::exception&) {
      // That peer is gone or sent something unreadable: no note from it.
    }
  }
  return false;
}

void Runtime::tell_peers(ErrorKind kind, const std::string& reason) {
  constexpr double kPatienceSeconds = 0.05;
  if (opts_.rank != 0) {
    RequestList note;
    note.abort = true;
    note.abort_kind = kind;
    note.abort_reason = reason;
    control_->post_msg(0, note.encode(), kPatienceSeconds);
    return;
  }
  ResponseList note;
  note.shutdown = true;
  note.shutdown_kind = kind;
  note.shutdown_reason = reason;
  std::vector<uint8_t> msg = note.encode([](const std::string&) -> int64_t { return -1; });
  for (int w = 1; w < opts_.size; ++w) control_->post_msg(w, msg, kPatienceSeconds);
}

std::string Runtime::unfinished_names() {
  constexpr size_t kNamed = 5;
  // Queued or executing; a finished operation whose handle is not yet
  // released lost nothing.
  std::vector<std::string> names = queue_.queued_names();
  for (const auto& [name, e] : pending_) names.push_back(name);
  if (names.empty()) return "";
  std::sort(names.begin(), names.end());
  const size_t total = names.size();
  if (total > kNamed) names.resize(kNamed);
  std::string text = "; unfinished on rank " + std::to_string(opts_.rank) + ": ";
  for (size_t i = 0; i < names.size(); ++i) text += (i ? ", '" : "'") + names[i] + "'";
  if (total > names.size()) text += " and " + std::to_string(total - names.size()) + " more";
  return text;
}

void Runtime::end_by_list(const ResponseList& list) {
  if (list.shutdown_kind != ErrorKind::Shutdown) {
    end(list.shutdown_kind, list.shutdown_reason, true);
  } else if (list.shutdown_rank >= 0 && list.shutdown_rank != opts_.rank) {
    // Another rank left: to this one it is a lost peer (an error worth
    // logging only if this rank still had work in flight).
    end(ErrorKind::PeerFailure, "lost " + control_->peer_name(list.shutdown_rank) + ": it left the job (called shutdown())",
        true, unfinished_names().empty());
  } else {
    end(ErrorKind::Shutdown, "ring has been shut down (" + list.shutdown_reason + ")");
  }
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
    bytes += q.encoded_bytes();
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
  for (const auto& r : list.responses) {
    if (log_enabled(LogLevel::Trace))
      log_line(LogLevel::Trace, std::string(r.kind == ResponseKind::Error ? "error for " : "") + op_type_name(r.op) +
                                    " of " + std::to_string(r.names.size()) + " tensor(s), first '" +
                                    (r.names.empty() ? "" : r.names[0]) + "'");
    executor_->run(r, pending_);
  }
}

std::string Runtime::cached_name(const ResponseList& list, uint32_t id) const {
  for (const auto& p : list.cache_puts)
    if (p.id == id) return p.name;
  return cache_.name_of(id);
}

bool Runtime::worker_step() {
  LoopState& s = loop_;
  bool progress = false;
  auto name_of = [this](const ResponseList& l, uint32_t id) { return cached_name(l, id); };
  while (control_->readable(0)) {
    ResponseList list = ResponseList::decode(control_->recv_msg(0, kMaxControlMessage), name_of);
    s.acked = list.acked;
    execute(list);
    progress = true;
    if (list.shutdown) {
      end_by_list(list);
      return true;
    }
  }
  if (queue_.has_new()) {
    std::vector<Entry> fresh = take_fresh();
    s.unsent.insert(s.unsent.end(), fresh.begin(), fresh.end());
  }
  bool want_shutdown = shutdown_requested_.load() && !s.shutdown_sent && s.unsent.empty();
  if (s.sent == s.acked && (!s.unsent.empty() || want_shutdown)) {
    RequestList list = request_list(s.unsent);
    list.shutdown = want_shutdown;
    control_->send_msg(0, list.encode());
    ++s.sent;
    s.shutdown_sent |= want_shutdown;
    progress = true;
  }
  if (!progress && seconds_since(s.last_check) > kIdleLivenessSeconds) {
    s.last_check = Clock::now();
    control_->check_alive(0);
  }
  return progress;
}

namespace {

constexpr double kStallPollSeconds = 0.2;
constexpr size_t kStallsNamed = 10;

std::string describe_stalls(const std::vector<Coordinator::Stall>& stalls) {
  std::string text;
  for (size_t i = 0; i < stalls.size() && i < kStallsNamed; ++i) {
    const auto& s = stalls[i];
    text += (i ? "; '" : "'") + s.name + "' (" + std::to_string(static_cast<long>(s.seconds)) + " s, not submitted by rank";
    text += s.missing.size() > 1 ? "s " : " ";
    for (size_t k = 0; k < s.missing.size(); ++k) text += (k ? ", " : "") + std::to_string(s.missing[k]);
    text += ")";
  }
  if (stalls.size() > kStallsNamed) text += "; and " + std::to_string(stalls.size() - kStallsNamed) + " more";
  return text;
}

}  // namespace

void Runtime::inspect_stalls(Coordinator& coord) {
  LoopState& s = loop_;
  const double check = config_.stall_check_seconds, fail = config_.stall_shutdown_seconds;
  if ((check <= 0 && fail <= 0) || seconds_since(s.last_stall_check) < kStallPollSeconds) return;
  Clock::time_point now = s.last_stall_check = Clock::now();
  if (fail > 0 && !coord.stalled(now, fail).empty()) {
    // The job ends for every tensor still waiting for some rank, so the
    // error names all of them, also those stalled for less time so far.
    coord.fail_stalled("stalled for more than " + std::to_string(static_cast<long>(fail)) +
                       " s (RING_STALL_SHUTDOWN_TIME_SECONDS): " + describe_stalls(coord.stalled(now, 0)));
    return;
  }
  if (check <= 0 || std::chrono::duration<double>(now - s.last_stall_warning).count() < check) return;
  auto stalls = coord.stalled(now, check);
  if (stalls.empty()) return;
  s.last_stall_warning = now;
  log_line(LogLevel::Warning,
           "stall: tensors submitted by some ranks but not by others for more than " +
               std::to_string(static_cast<long>(check)) +
               " s (RING_STALL_CHECK_TIME_SECONDS); a rank may be stuck, or the ranks took different paths "
               "through the program: " + describe_stalls(stalls));
}

void Runtime::autotune(Coordinator& coord, const ResponseList& list) {
  size_t bytes = 0;
  for (const auto& r : list.responses) {
    if (r.kind != ResponseKind::Execute || r.op != OpType::Allreduce) continue;
    for (int64_t count : r.sizes) bytes += static_cast<size_t>(count) * dtype_size(r.dtype);
  }
  if (!loop_.tuner->record(bytes, Clock::now())) return;
  TuneParams p = loop_.tuner->params();
  coord.set_fusion_threshold(p.fusion_threshold_bytes);
  loop_.cycle_time_ms = p.cycle_time_ms;
  log_line(LogLevel::Info, std::string(loop_.tuner->settled() ? "autotune settled on" : "autotune trying") +
                               " fusion threshold " + std::to_string(p.fusion_threshold_bytes) + " bytes, cycle time " +
                               std::to_string(p.cycle_time_ms) + " ms");
}

bool Runtime::coordinator_step() {
  LoopState& s = loop_;
  const int n = opts_.size;
  if (!s.coord) {
    s.coord = std::make_unique<Coordinator>(n, &cache_, config_.fusion_threshold_bytes);
    // Over shared memory a 128 KiB allreduce already runs near full speed,
    // and copying it through the fusion buffer costs more than running it
    // alone; across hosts each operation's latency weighs more.
    s.coord->set_alone_bytes(opts_.local_size == n ? kAloneBytesOneHost : kAloneBytesSeveralHosts);
    s.coord->set_timeline(&timeline_);
    std::vector<std::string> names;
    for (int r = 0; r < n; ++r) names.push_back(control_->peer_name(r));
    s.coord->set_rank_names(std::move(names));
    s.cycle_time_ms = config_.cycle_time_ms;
    if (config_.autotune)
      s.tuner = std::make_unique<Autotuner>(TuneParams{config_.fusion_threshold_bytes, config_.cycle_time_ms},
                                            config_.autotune_sample_seconds, config_.autotune_warmup_samples, 2,
                                            config_.autotune_log);
    s.received.assign(n, 0);
    s.acked_by.assign(n, 0);
  }
  Coordinator& coord = *s.coord;
  bool progress = false;
  if (queue_.has_new()) {
    const long long ts = timeline_.now();
    for (auto& e : take_fresh()) coord.add_request(0, e.req, ts);
    progress = true;
  }
  if (shutdown_requested_.load() && !s.shutdown_noted) {
    coord.request_shutdown(0);
    s.shutdown_noted = progress = true;
  }
  for (int w = 1; w < n; ++w) {
    if (!control_->readable(w)) continue;
    RequestList requests = RequestList::decode(control_->recv_msg(w, kMaxControlMessage));
    if (requests.abort) {  // a worker failed: its cause ends the job everywhere
      end(requests.abort_kind, requests.abort_reason);
      return true;
    }
    coord.add(w, requests);
    ++s.received[w];
    progress = true;
  }
  inspect_stalls(coord);
  bool need_ack = false;
  for (int w = 1; w < n; ++w) need_ack |= s.received[w] != s.acked_by[w];
  // Gather a batch while its tensors are still arriving, at most one cycle.
  if (coord.has_work() && !s.batching) {
    s.batching = true;
    s.first_ready = Clock::now();
  }
  const double cycle_s = s.cycle_time_ms / 1000.0;
  bool emit = coord.has_work() && !(coord.worth_waiting() && seconds_since(s.first_ready) < cycle_s);
  if (emit || need_ack) {
    if (emit) timeline_.cycle_start();
    ResponseList list = emit ? coord.take() : ResponseList{};
    if (s.tuner && emit) autotune(coord, list);
    s.batching = s.batching && !emit;
    bool has_responses = !list.responses.empty() || list.shutdown || !list.cache_puts.empty();
    auto id_of = [this](const std::string& name) { return cache_.id_of(name); };
    for (int w = 1; w < n; ++w) {
      if (!has_responses && s.received[w] == s.acked_by[w]) continue;
      list.acked = s.acked_by[w] = s.received[w];
      control_->send_msg(w, list.encode(id_of));
    }
    execute(list);
    if (list.shutdown) {
      end_by_list(list);
      return true;
    }
    progress = true;
  }
  if (!progress && seconds_since(s.last_check) > kIdleLivenessSeconds) {
    s.last_check = Clock::now();
    for (int w = 1; w < n; ++w) control_->check_alive(w);
  }
  return progress;
}

}  // namespace ring
