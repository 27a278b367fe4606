// Timeline: a Chrome trace (JSON array format) of what the engine does with
// every tensor, written by rank 0, which sees every rank's negotiation.
// Loads in Perfetto (ui.perfetto.dev) and chrome://tracing.
//
// One row ("process") per tensor name. For each operation:
//   NEGOTIATE_<OP>   from the first rank's request until rank 0 schedules
//                    it, with an instant named after each rank as it
//                    submits (begin / end events: an unfinished negotiation
//                    shows as an open bar);
//   <OP>             the execution on rank 0 (begin / end), containing
//     PRESCALE (prescale_factor) or MEMCPY_IN_FUSION_BUFFER (tensors that
//     share memory), the collective itself (RING_ALLREDUCE, ...),
//     MEMCPY_OUT_FUSION_BUFFER (complete events, written when they end)
//   and dtype and shape on the event that closes <OP>.
// With mark_cycles, a CYCLE_START tick on row 0 every time rank 0 sends
// out a batch of work.
//
// Cost: the engine only appends fixed-size records (timeline_format.h) to a
// batch under a short lock, one per phase of a fused batch and one per list
// of requests a rank sent together (group events: the rows are copied, the
// lines are made later); a writer thread of the timeline's own takes the
// batch every 100 ms, turns it into text and writes it, at the lowest
// scheduling priority (SCHED_IDLE). So the file is "["
// then one event per line, each line ending in ",", at most ~100 ms behind;
// stop() ends it with "{}]", so it is valid JSON after shutdown. After a
// crash the closing "]" is missing: Chrome and Perfetto load it as it is,
// and ring_strategy.timeline.load() closes it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/message.h"
#include "engine/timeline_format.h"

namespace ring {

class Timeline {
 public:
  // Where a caller remembers a tensor's row between calls (valid for the
  // file it was found in only).
  struct Row {
    int id = -1;
    uint64_t file = 0;
  };

  ~Timeline();
  // Starts a new file at `path` (replacing one already being written).
  // Throws RingError(BadArgument) when it cannot be created.
  void start(const std::string& path, bool mark_cycles);
  // Writes what is recorded and closes the file; no-op when not started.
  void stop();
  bool active() const { return active_.load(std::memory_order_relaxed); }
  bool marks_cycles() const { return mark_cycles_.load(std::memory_order_relaxed); }

  // µs since the file started; -1 when not active. Callers that record
  // several events of one moment take one time stamp for all of them.
  long long now() const { return active_.load(std::memory_order_acquire) ? now_us() : -1; }
  // `rank` submitted `tensor` at `ts` (-1: now); the first submission
  // (first = true) also opens NEGOTIATE_<op>. `row` caches the tensor's row
  // for the next calls.
  void rank_ready(const std::string& tensor, Row* row, OpType op, int rank, bool first, long long ts = -1);
  void negotiate_end(const std::string& tensor, Row* row, long long ts = -1);
  // Rows of `tensors`, in order, for begin/span/end_ops: `known` when they
  // were found in this file (its number `file`, from a Row), else looked up.
  void rows(const std::vector<const std::string*>& tensors, const std::vector<int32_t>& known, uint64_t file,
            std::vector<int>* out);
  // Opens `phase` on each row (one time stamp for all); end_ops closes it.
  void begin(const std::vector<int>& rows, const char* phase);
  // Records `phase`, from `began` (a now() value) until now, on each row:
  // one complete event per row, written when the phase is over.
  void span(const std::vector<int>& rows, const char* phase, long long began);
  // Closes each operation's outermost phase with its dtype and shape
  // (requests[i] belongs to rows[i]).
  void end_ops(const std::vector<int>& rows, const std::vector<const Request*>& requests);
  void cycle_start();

 private:
  // Locks mu_ for recording, first waiting for the writer while the batch
  // is full.
  std::unique_lock<std::mutex> record_lock();
  int row(const std::string& tensor, Row* cache);  // caller holds mu_
  // Stores `count` rows for a group event; returns its TimelineEvent::row.
  int32_t group(const int* rows, size_t count);  // caller holds mu_
  // Records an event on `row` as part of the last event recorded when that
  // is a group of the same kind, phase, arg and time stamp (a rank's
  // requests arrive together and share one), else as a new group.
  void add_to_group(char kind, const char* name, int row, long long ts, int32_t arg = 0);  // caller holds mu_
  long long now_us() const;
  void push(char kind, const char* name, int row, long long ts, int32_t arg = 0);  // caller holds mu_
  void write_loop();
  void write_file(const char* data, size_t size);

  std::mutex mu_;
  std::condition_variable wake_;  // the writer's
  std::condition_variable room_;  // the writer took the batch
  std::atomic<bool> active_{false};
  std::atomic<bool> mark_cycles_{false};
  bool recording_ = false;  // guarded by mu_; false once stop() began
  bool stopping_ = false;   // guarded by mu_: the writer drains and leaves
  int fd_ = -1;
  size_t written_ = 0;   // bytes handed to fd_
  size_t reserved_ = 0;  // bytes of fd_ with blocks reserved (write_file)
  bool reserve_ = true;  // false once reserving failed
  TimelineText text_{[this](const char* data, size_t size) { write_file(data, size); }};  // to fd_
  uint64_t file_number_ = 0;
  TimelineBatch batch_;  // recorded, not yet taken by the writer
  static constexpr size_t kNoGroup = static_cast<size_t>(-2);
  size_t open_group_ = kNoGroup;  // index in batch_.events of the group add_to_group may extend
  // Rows by tensor name, and each row's name (row_names_[id - 1]). Tensors
  // arrive in the same order step after step, so the row after the last one
  // looked up is tried first: one string comparison instead of a hash
  // lookup that misses the cache (200 tensors a step made it a fifth of the
  // recording's cost).
  std::unordered_map<std::string, int> rows_;
  std::vector<std::string> row_names_;
  int last_row_ = 0;
  std::chrono::steady_clock::time_point t0_;
  std::thread writer_;
};

// "NEGOTIATE_ALLREDUCE", "ALLREDUCE", "RING_ALLREDUCE", ... for `op`.
const char* negotiate_phase(OpType op);
const char* op_phase(OpType op);
const char* collective_phase(OpType op);

}  // namespace ring
