// Rank 0's progress step: feeds its own entries and every worker's
// RequestLists to the Coordinator; whenever something is ready (or a worker
// needs its acknowledgement) sends the ResponseList to every worker and
// executes it. A batch is gathered while its tensors are still arriving, at
// most one cycle (RING_CYCLE_TIME) from the first ready one.
#include "collectives/allreduce_choice.h"
#include "common/error.h"
#include "engine/runtime.h"
#include "transport/waiter.h"

namespace ring {

void Runtime::start_coordinator() {
  LoopState& s = loop_;
  const int n = opts_.size;
  s.coord = std::make_unique<Coordinator>(n, &cache_, config_.fusion_threshold_bytes);
  s.coord->set_process_sets(&sets_);
  s.coord->set_alone_bytes(alone_bytes(opts_.local_size == n));
  s.coord->set_timeline(&timeline_);
  std::vector<std::string> names;
  for (int r = 0; r < n; ++r) names.push_back(control_->peer_name(r));
  s.coord->set_rank_names(std::move(names));
  s.stalls = std::make_unique<StallInspector>(config_.stall_check_seconds, config_.stall_shutdown_seconds);
  s.cycle_time_ms = config_.cycle_time_ms;
  if (config_.autotune)
    s.tuner = std::make_unique<Autotuner>(TuneParams{config_.fusion_threshold_bytes, config_.cycle_time_ms},
                                          config_.autotune_sample_seconds, config_.autotune_warmup_samples, 2,
                                          config_.autotune_log);
  s.received.assign(n, 0);
  s.acked_by.assign(n, 0);
}

bool Runtime::gather_requests(Coordinator& coord) {
  LoopState& s = loop_;
  bool progress = false;
  if (queue_.has_new()) {
    const long long ts = timeline_.now();
    take_fresh([&](const Request& q) { coord.add_local(0, q, ts); });
    progress = true;
  }
  if (shutdown_requested_.load() && !s.shutdown_noted) {
    coord.request_shutdown(0);
    s.shutdown_noted = progress = true;
  }
  for (int w = 1; w < opts_.size; ++w) {
    if (!control_->readable(w)) continue;
    s.heartbeats->heard(w);
    std::vector<uint8_t> msg = control_->recv_msg(w, kMaxControlMessage);
    if (msg.empty()) continue;  // a heartbeat
    if (FastMessage::is_fast(msg)) {
      fast_->receive(w, std::move(msg));
      progress = true;
      continue;
    }
    RequestList requests = RequestList::decode(msg);
    if (requests.abort) {  // a worker failed: its cause ends the job everywhere
      end(requests.abort_kind, requests.abort_reason);
      return true;
    }
    coord.add(w, requests);
    ++s.received[w];
    progress = true;
  }
  return progress;
}

bool Runtime::emit_responses(Coordinator& coord) {
  LoopState& s = loop_;
  bool need_ack = false;
  for (int w = 1; w < opts_.size; ++w) need_ack |= s.received[w] != s.acked_by[w];
  if (coord.has_work() && !s.batching) {
    s.batching = true;
    s.first_ready = s.now;
  }
  const double cycle_s = s.cycle_time_ms / 1000.0;
  const bool emit = coord.has_work() && !(coord.worth_waiting() && seconds_since(s.first_ready) < cycle_s);
  if (!emit && !need_ack) return false;
  if (emit) timeline_.cycle_start();
  ResponseList list = emit ? coord.take() : ResponseList{};
  if (s.tuner && emit) autotune(coord, list);
  s.batching = s.batching && !emit;
  const bool has_responses = !list.responses.empty() || list.shutdown || !list.cache_puts.empty();
  auto id_of = [this](const std::string& name) { return cache_.id_of(name); };
  std::vector<uint8_t> msg;  // encoded once: workers' lists differ only in `acked`
  for (int w = 1; w < opts_.size; ++w) {
    if (!has_responses && s.received[w] == s.acked_by[w]) continue;
    list.acked = s.acked_by[w] = s.received[w];
    if (msg.empty()) msg = list.encode(id_of);
    else ResponseList::set_encoded_acked(msg, list.acked);
    control_->send_msg(w, msg);
  }
  execute(list);
  if (list.shutdown) end_by_list(list);
  return true;
}

void Runtime::autotune(Coordinator& coord, const ResponseList& list) {
  size_t bytes = 0;
  for (const auto& r : list.responses) {
    if (r.kind != ResponseKind::Execute || r.op != OpType::Allreduce) continue;
    for (int64_t count : r.sizes) bytes += static_cast<size_t>(count) * dtype_size(r.dtype);
  }
  if (!loop_.tuner->record(bytes, std::chrono::steady_clock::now())) return;
  TuneParams p = loop_.tuner->params();
  coord.set_fusion_threshold(p.fusion_threshold_bytes);
  loop_.cycle_time_ms = p.cycle_time_ms;
  log_line(LogLevel::Info, std::string(loop_.tuner->settled() ? "autotune settled on" : "autotune trying") +
                               " fusion threshold " + std::to_string(p.fusion_threshold_bytes) + " bytes, cycle time " +
                               std::to_string(p.cycle_time_ms) + " ms");
}

bool Runtime::coordinator_step() {
  LoopState& s = loop_;
  if (!s.coord) start_coordinator();
  Coordinator& coord = *s.coord;
  s.heartbeats->send_due();
  // Before this step takes rank 0's entries: none recorded goes fast.
  fast_->set_recording(timeline_.active());
  bool progress = gather_requests(coord);
  if (s.finished) return true;  // a worker's failure ended the job
  progress |= fast_step([&](const Request& q) { coord.add_local(0, q, timeline_.now()); });
  s.stalls->inspect(coord, s.now);
  progress |= emit_responses(coord);
  if (s.finished) return true;  // the list ended the job
  if (liveness_due(progress)) {
    for (int w = 1; w < opts_.size; ++w) control_->check_alive(w);
    s.heartbeats->check();
  }
  return progress;
}

}  // namespace ring
