// What the timeline records while the engine runs, and the Chrome trace
// text it becomes later, on the timeline's writer thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace ring {

// One trace event (or one for each row of a group), fixed size: recording
// one costs a few stores.
struct TimelineEvent {
  long long ts;      // µs since the file started (for 'S': when the span began)
  const char* name;  // a phase name with static storage, or null
  int32_t row;       // the trace's "pid"; below 0, a group event: the same event on
                     // every row of the group at offset -1 - row in groups
  int32_t arg;       // 'I', 'R': the rank; 'S': duration in µs; 'e': offset into dims;
                     // 'M': index into names
  char kind;         // 'B' / 'E' phase begins / ends, 'S' a whole (complete) phase,
                     // 'I' a rank's readiness, 'R' (groups only) a negotiation begins
                     // with a rank's readiness, 'e' end of an operation with its
                     // dtype and shape, 'C' cycle start, 'M' a new row and its name
};

// Events in recording order, with what some of them refer to.
struct TimelineBatch {
  std::vector<TimelineEvent> events;
  std::vector<int64_t> dims;       // per 'e' event: dtype, rank of the shape, the dims
  std::vector<std::string> names;  // per 'M' event: the tensor's name
  // Per group event: the number of rows, then the rows. A phase on every
  // tensor of a fused batch is one event and one copy of the rows here
  // while the engine records it; the writer makes the lines.
  std::vector<int32_t> groups;
  // Memory the records take (tensor names aside: one per new row).
  size_t bytes() const {
    return events.size() * sizeof(TimelineEvent) + dims.size() * sizeof(int64_t) + groups.size() * sizeof(int32_t);
  }
  void clear() {
    events.clear();
    dims.clear();
    names.clear();
    groups.clear();
  }
};

// Text on its way to the file: a fixed buffer that the formatter writes
// into directly and that goes to `sink` whenever the next piece might not
// fit. Each byte is written once, into memory that stays in cache; a text
// that grew to hold a whole batch would be copied as it grows and fault in
// fresh pages every time.
class TimelineText {
 public:
  // Called with each full buffer; `data` is valid during the call only.
  using Sink = std::function<void(const char* data, size_t size)>;
  static constexpr size_t kCapacity = 256 << 10;

  explicit TimelineText(Sink sink) : sink_(std::move(sink)), buf_(kCapacity) {}
  // Where at least `n` (<= kCapacity) bytes can be written; commit(end)
  // keeps what was written up to `end`.
  char* room(size_t n) {
    if (kCapacity - used_ < n) flush();
    return buf_.data() + used_;
  }
  void commit(const char* end) { used_ = static_cast<size_t>(end - buf_.data()); }
  void append(const char* s, size_t n);
  void append(const std::string& s) { append(s.data(), s.size()); }
  // Hands what is buffered to the sink.
  void flush();

 private:
  Sink sink_;
  std::vector<char> buf_;
  size_t used_ = 0;
};

// The file's first lines: "[" and row 0, named "ring".
void format_timeline_header(long long start_since_epoch_us, TimelineText* out);
// One line per event of `batch`, each ending in ",\n".
void format_timeline_batch(const TimelineBatch& batch, TimelineText* out);

}  // namespace ring
