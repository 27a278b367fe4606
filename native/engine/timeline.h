// Timeline: a Chrome trace (JSON array format) of what the engine does with
// every tensor, written by rank 0, which sees every rank's negotiation.
// Loads in Perfetto (ui.perfetto.dev) and chrome://tracing.
//
// One row ("process") per tensor name. For each operation:
//   NEGOTIATE_<OP>   from the first rank's request until rank 0 schedules
//                    it, with a tick named after each rank as it submits;
//   <OP>             the execution on rank 0, containing
//     MEMCPY_IN_FUSION_BUFFER, the collective itself (RING_ALLREDUCE, ...),
//     MEMCPY_OUT_FUSION_BUFFER
//   and dtype and shape on the event that closes <OP>.
// With mark_cycles, a CYCLE_START tick on row 0 every time rank 0 sends
// out a batch of work.
//
// The file is "[" then one event per line, each line ending in ",", flushed
// at least every 100 ms; stop() ends it with "{}]", so it is valid JSON after
// shutdown. After a crash the closing "]" is missing: Chrome and Perfetto
// load it as it is, and ring_strategy.timeline.load() closes it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/message.h"

namespace ring {

class Timeline {
 public:
  ~Timeline();
  // Starts a new file at `path` (replacing one already being written).
  // Throws RingError(BadArgument) when it cannot be created.
  void start(const std::string& path, bool mark_cycles);
  // Closes the file; no-op when not started.
  void stop();
  bool active() const { return active_.load(std::memory_order_relaxed); }
  bool marks_cycles() const { return mark_cycles_.load(std::memory_order_relaxed); }

  void negotiate_start(const std::string& tensor, OpType op);
  void rank_ready(const std::string& tensor, int rank);
  void negotiate_end(const std::string& tensor, OpType op);
  // Opens / closes a phase on each tensor's row (one time stamp for all);
  // phases nest.
  void begin(const std::vector<const std::string*>& tensors, const char* phase);
  void end(const std::vector<const std::string*>& tensors);
  // Closes the operation's outermost phase with its dtype and shape.
  void end_op(const std::string& tensor, const Request& q);
  void cycle_start();
  // Writes buffered events if the last write is older than 100 ms.
  void maybe_flush();

 private:
  int row(const std::string& tensor);  // caller holds mu_
  // Appends one event at `ts` (µs since start); caller holds mu_.
  void event(char ph, const char* name, int pid, const char* extra = "", long long ts = -1);
  void write_out();  // caller holds mu_

  std::mutex mu_;
  std::atomic<bool> active_{false};
  std::atomic<bool> mark_cycles_{false};
  std::FILE* file_ = nullptr;
  std::string buf_;
  std::unordered_map<std::string, int> rows_;
  std::chrono::steady_clock::time_point t0_, last_write_;
};

// "NEGOTIATE_ALLREDUCE", "ALLREDUCE", "RING_ALLREDUCE", ... for `op`.
const char* negotiate_phase(OpType op);
const char* op_phase(OpType op);
const char* collective_phase(OpType op);

}  // namespace ring
