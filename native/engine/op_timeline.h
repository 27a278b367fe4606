// OpTimeline: the timeline events of the response a backend is running, for
// any backend. open() starts the operation on the rows of the response's
// tensors, phase_begin / phase_end time an inner phase (PRESCALE,
// RING_ALLREDUCE, ...; they do not nest), close() ends the operation with
// each tensor's dtype and shape. Everything is a no-op while the timeline is
// off, and on ranks without one (only rank 0 writes it).
//
// Cost: scratch vectors are reused from response to response; nothing is
// allocated per tensor once they have grown.
#pragma once

#include <string>
#include <vector>

#include "engine/message.h"
#include "engine/tensor_queue.h"
#include "engine/timeline.h"

namespace ring {

class OpTimeline {
 public:
  // Events go to `timeline` (null: none).
  void set_timeline(Timeline* timeline) { timeline_ = timeline; }

  void open(const std::vector<Entry>& entries, const Response& r);
  void phase_begin(const char* phase);
  void phase_end();
  void close(const std::vector<Entry>& entries);

  // For a backend whose work completes on another thread (backends/gpu/finalizer.h):
  // what closes the operation open() started, there, later.
  struct Deferred {
    Timeline* timeline = nullptr;
    std::vector<int> rows;  // empty: nothing recorded
    std::vector<Request> requests;
    const char* phase = "";
    long long began = -1;
  };
  // Hands over open()'s operation, its inner `phase` running from now;
  // this OpTimeline no longer has an operation open.
  Deferred defer(const std::vector<Entry>& entries, const char* phase);
  // Records d's phase until now and ends its operation. Any thread.
  static void finish(const Deferred& d);

 private:
  Timeline* timeline_ = nullptr;
  std::vector<int> rows_;     // of the response running now; empty: not recorded
  const char* phase_ = "";    // its inner phase, since phase_began_
  long long phase_began_ = -1;
  std::vector<const std::string*> names_;  // scratch
  std::vector<const Request*> requests_;   // scratch
};

}  // namespace ring
