// What the timeline records while the engine runs, and the Chrome trace
// text it becomes later, on the timeline's writer thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ring {

// One trace event, fixed size: recording one costs a few stores.
struct TimelineEvent {
  long long ts;      // µs since the file started (for 'S': when the span began)
  const char* name;  // a phase name with static storage, or null
  int32_t row;       // the trace's "pid"
  int32_t arg;       // 'I': the rank; 'S': duration in µs; 'e': offset into dims;
                     // 'M': index into names
  char kind;         // 'B' / 'E' phase begins / ends, 'S' a whole (complete) phase,
                     // 'I' a rank's readiness, 'e' end of an operation with its
                     // dtype and shape, 'C' cycle start, 'M' a new row and its name
};

// Events in recording order, with what some of them refer to.
struct TimelineBatch {
  std::vector<TimelineEvent> events;
  std::vector<int64_t> dims;       // per 'e' event: dtype, rank of the shape, the dims
  std::vector<std::string> names;  // per 'M' event: the tensor's name
  void clear() {
    events.clear();
    dims.clear();
    names.clear();
  }
};

// The file's first lines: "[" and row 0, named "ring".
void format_timeline_header(long long start_since_epoch_us, std::string* out);
// Appends one line per event of `batch`, each ending in ",\n".
void format_timeline_batch(const TimelineBatch& batch, std::string* out);

}  // namespace ring
