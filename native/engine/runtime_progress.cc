// The progress loop: one step() at a time, by the background thread or by a
// caller waiting for its operation (see Runtime::wait), and the end of the
// job on this rank. A step is rank 0's coordinator step (coordinator_loop.cc)
// or a worker's step (worker_loop.cc).
//
// The background thread waits with Backoff when idle, so an idle job costs
// almost no CPU and a busy one reacts within microseconds. A caller in
// wait() steps itself while progress comes quickly and hands back to the
// background thread (waking it) when it stops, so no work is left waiting.
#include <algorithm>
#include <chrono>
#include <thread>

#include "common/error.h"
#include "engine/runtime.h"
#include "transport/doorbell.h"
#include "transport/waiter.h"

namespace ring {
namespace {

// A rank with nothing in flight sleeps on the queue's condition variable
// this long at most (then checks its peers), so an idle job costs nothing.
constexpr double kQuietWaitSeconds = 0.002;
// A waiting caller stops stepping after this long without progress (a peer
// that is still computing) and sleeps until its operation is done.
constexpr double kDriveIdleSeconds = 0.002;
// The background thread stays awake this long after its last progress.
constexpr double kLingerSeconds = 100e-6;
// How long a caller's claim to drive its operation holds without renewal.
constexpr int64_t kDriveClaimNs = 1'000'000;

int64_t ns_of(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

int64_t now_ns() { return ns_of(std::chrono::steady_clock::now()); }

// `why`, a failure rank `me` (its peer name) saw itself, as the other ranks
// read it: "rank 0 (host, pid 7) lost rank 1 (...): ...", or "on rank 0
// (host, pid 7): ..." for other causes; unchanged when it names `me` first.
std::string seen_on(const std::string& me, const std::string& why) {
  if (why.rfind(me, 0) == 0) return why;
  if (why.rfind("lost ", 0) == 0) return me + " " + why;
  return "on " + me + ": " + why;
}

}  // namespace

void Runtime::loop() {
  Backoff backoff;
  while (true) {
    if (drive_claimed()) {
      // A caller drives its own operation: stepping too would only take
      // its core and its lock. drive() notifies when it hands back.
      queue_.wait_notified(kDriveClaimNs * 1e-9);
      backoff.reset();
      continue;
    }
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
    else idle_wait(backoff);
  }
  // Closing tells peers still waiting on us that we are gone.
  data_->close();
  control_->close();
}

bool Runtime::wait(int64_t handle, double timeout_s) {
  if (handles_.poll(handle)) {
    release_drive();  // nothing to drive
    return true;
  }
  drive(handle);
  return handles_.wait(handle, timeout_s);
}

bool Runtime::wait_all(const std::vector<int64_t>& handles, double timeout_s) {
  const auto start = std::chrono::steady_clock::now();
  // Finished handles are skipped under one lock (the usual case after the
  // first: no clock, no drive); handles only ever finish, so the scan moves on.
  for (size_t i = handles_.first_unfinished(handles); i < handles.size();
       i = handles_.first_unfinished(handles, i + 1)) {
    const double left = timeout_s < 0 ? -1.0 : std::max(0.0, timeout_s - seconds_since(start));
    if (!wait(handles[i], left)) return false;
  }
  release_drive();  // all done: nothing left to drive
  return true;
}

// Counts from the start of the last step (no clock of its own).
void Runtime::claim_drive() { drive_claim_ns_.store(ns_of(loop_.now) + kDriveClaimNs, std::memory_order_relaxed); }

bool Runtime::drive_claimed() const {
  const int64_t until = drive_claim_ns_.load(std::memory_order_relaxed);
  return until != 0 && now_ns() < until;
}

void Runtime::drive(int64_t handle) {
  Backoff backoff;
  bool done = false, left = false;
  // Polls the table (a lock) only when some handle has finished since the
  // last poll: read the count first, so a handle finishing after that is
  // seen by this poll or moves the count for the next.
  bool polled = false;
  uint64_t seen = 0;
  auto finished = [&] {
    const uint64_t count = handles_.finished_count();
    if (!polled || count != seen) {
      polled = true;
      seen = count;
      done = handles_.poll(handle);
    }
    return done;
  };
  while (!finished() && backoff.idle_seconds() < kDriveIdleSeconds) {
    std::unique_lock<std::mutex> lock(progress_mu_, std::try_to_lock);
    if (lock.owns_lock() && !loop_.finished) {
      bool progress = step();
      claim_drive();
      left = !quiet();
      if (progress) {
        backoff.reset();
        continue;
      }
    }
    lock = {};
    backoff.wait();
  }
  release_drive();
  // The background thread may be asleep on the queue (entries queued with
  // wake = false, or it deferred to us): wake it for what is in flight.
  if (!done || left || queue_.has_new()) queue_.notify();
}

void Runtime::idle_wait(Backoff& backoff) {
  Doorbell* bell = control_->doorbell();
  if (!bell || !backoff.blocking_due()) return backoff.wait();
  auto news = [&] {
    // The mesh is driven by one thread at a time: a caller stepping now
    // (holding progress_mu_) will hand back to us when it stops.
    std::unique_lock<std::mutex> lock(progress_mu_, std::try_to_lock);
    if (!lock.owns_lock() || loop_.finished) return true;
    try {
      if (queue_.has_news()) return true;
      if (opts_.rank != 0) return control_->readable(0) || fast_->readable();
      for (int peer = 1; peer < opts_.size; ++peer)
        if (control_->readable(peer)) return true;
      return false;
    } catch (const RingError&) {
      return true;  // a lost peer: the next step says so
    }
  };
  sleep_on_doorbell(bell, kQuietWaitSeconds, news);
  queue_.clear_notified();
}

bool Runtime::step() {
  if (loop_.finished) return false;
  try {
    executor_->check();
    loop_.now = std::chrono::steady_clock::now();
    return opts_.rank == 0 ? coordinator_step() : worker_step();
  } catch (const RingError& e) {
    end(e.kind(), e.what());
  } catch (const std::exception& e) {
    end(ErrorKind::Internal, std::string("background thread failed: ") + e.what());
  }
  return true;
}

bool Runtime::liveness_due(bool progress) {
  LoopState& s = loop_;
  if (progress || std::chrono::duration<double>(s.now - s.last_check).count() <= kIdleLivenessSeconds) return false;
  s.last_check = s.now;
  return true;
}

void Runtime::end(ErrorKind kind, const std::string& reason, bool from_peer, bool quiet) {
  loop_.finished = true;
  std::string why = reason;
  if (kind != ErrorKind::Shutdown) {
    std::optional<ResponseList> orderly;
    bool noted = !from_peer && peer_note(&kind, &why, &orderly);
    // A peer that failed first sends its note before it closes, but the note
    // travels on the control connection and may come just after this rank
    // saw the peer's data connection close: give it a moment to arrive.
    constexpr double kNoteGraceSeconds = 0.1;
    auto lost_at = std::chrono::steady_clock::now();
    while (!from_peer && !noted && kind == ErrorKind::PeerFailure && seconds_since(lost_at) < kNoteGraceSeconds) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      noted = peer_note(&kind, &why, &orderly);
    }
    if (noted && orderly) {
      // Rank 0 had sent an orderly shutdown before it closed: end as if
      // that list had been read first (the closed connection won the race).
      end_by_list(*orderly);
      return;
    }
    why += unfinished_names();  // what this rank loses, whoever saw the cause
    // A peer's note names its sender already; this rank's own cause is
    // passed on naming this rank (to rank 1, "lost rank 1" alone would name
    // the wrong end of the link).
    if (!from_peer) tell_peers(kind, noted ? why : seen_on(control_->peer_name(opts_.rank), why));
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
        if (msg.empty() || FastMessage::is_fast(msg)) continue;  // a heartbeat, a fast-path round
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
    return;
  }
  // Every rank ran the responses before this list: their GPU work finishes.
  executor_->settle(config_.timeout_seconds);
  if (list.shutdown_rank >= 0 && list.shutdown_rank != opts_.rank) {
    // Another rank left: to this one it is a lost peer (an error worth
    // logging only if this rank still had work in flight). A fast round it
    // finished before leaving finishes here too.
    constexpr double kLeftRoundGraceSeconds = 1.0;
    fast_->finish_before_end(kLeftRoundGraceSeconds);
    end(ErrorKind::PeerFailure, "lost " + control_->peer_name(list.shutdown_rank) + ": it left the job (called shutdown())",
        true, unfinished_names().empty());
  } else {
    end(ErrorKind::Shutdown, "ring has been shut down (" + list.shutdown_reason + ")");
  }
}

void Runtime::take_fresh(const std::function<void(const Request&)>& each) {
  std::vector<Entry> fresh = queue_.take_all();
  fast_->begin_batch(fresh);
  for (auto& e : fresh) {
    if (!fast_->admit(e.req, loop_.now)) each(e.req);
    if (e.req.op == OpType::Join) executor_->set_joined(true);
    auto node = executor_->spare_nodes().take();
    if (node.empty()) {
      std::string name = e.req.name;
      pending_.emplace(std::move(name), std::move(e));
      continue;
    }
    node.key() = e.req.name;
    node.mapped() = std::move(e);
    pending_.insert(std::move(node));
  }
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
    fast_->note_response(r);
    executor_->run(r, pending_);
  }
}

bool Runtime::fast_step(const std::function<void(const Request&)>& to_negotiation) {
  std::vector<Request> back;
  const bool progress = fast_->step(loop_.now, back);
  for (const Request& q : back) to_negotiation(q);
  return progress;
}

std::string Runtime::cached_name(const ResponseList& list, uint32_t id) const {
  for (const auto& p : list.cache_puts)
    if (p.id == id) return p.name;
  return cache_.name_of(id);
}

}  // namespace ring
