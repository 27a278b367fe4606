#include "engine/timeline.h"

#include <cerrno>
#include <charconv>
#include <cstring>

#include "common/error.h"

namespace ring {
namespace {

constexpr size_t kFlushBytes = 1 << 20;
constexpr double kFlushSeconds = 0.1;

void append_int(std::string& s, long long v) {
  char buf[24];
  auto res = std::to_chars(buf, buf + sizeof(buf), v);
  s.append(buf, res.ptr);
}

// JSON string contents: quotes, backslashes and control characters escaped.
void append_escaped(std::string& s, const std::string& text) {
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') {
      s += '\\';
      s += static_cast<char>(c);
    } else if (c < 0x20) {
      static const char* hex = "0123456789abcdef";
      s += "\\u00";
      s += hex[c >> 4];
      s += hex[c & 15];
    } else {
      s += static_cast<char>(c);
    }
  }
}

}  // namespace

const char* negotiate_phase(OpType op) {
  static const char* names[kNumOpTypes] = {"NEGOTIATE_ALLREDUCE", "NEGOTIATE_ALLGATHER", "NEGOTIATE_BROADCAST",
                                           "NEGOTIATE_ALLTOALL",  "NEGOTIATE_REDUCESCATTER", "NEGOTIATE_BARRIER",
                                           "NEGOTIATE_JOIN"};
  return names[static_cast<int>(op) % kNumOpTypes];
}

const char* op_phase(OpType op) {
  static const char* names[kNumOpTypes] = {"ALLREDUCE", "ALLGATHER", "BROADCAST", "ALLTOALL",
                                           "REDUCESCATTER", "BARRIER", "JOIN"};
  return names[static_cast<int>(op) % kNumOpTypes];
}

const char* collective_phase(OpType op) {
  static const char* names[kNumOpTypes] = {"RING_ALLREDUCE", "RING_ALLGATHER", "CHAIN_BROADCAST",
                                           "PAIRWISE_ALLTOALL", "RING_REDUCESCATTER", "DISSEMINATION_BARRIER",
                                           "JOIN"};
  return names[static_cast<int>(op) % kNumOpTypes];
}

Timeline::~Timeline() { stop(); }

void Timeline::start(const std::string& path, bool mark_cycles) {
  stop();
  std::lock_guard<std::mutex> lock(mu_);
  file_ = std::fopen(path.c_str(), "w");
  if (!file_)
    throw_error(ErrorKind::BadArgument, "cannot write the timeline to '" + path + "': " + std::strerror(errno));
  rows_.clear();
  buf_.reserve(kFlushBytes + 4096);  // appends never move the buffer
  buf_ = "[\n";
  t0_ = last_write_ = std::chrono::steady_clock::now();
  long long epoch_us = std::chrono::duration_cast<std::chrono::microseconds>(
                           std::chrono::system_clock::now().time_since_epoch()).count();
  buf_ += R"({"name": "process_name", "ph": "M", "pid": 0, "args": {"name": "ring", "start_time_since_epoch_in_micros": )";
  append_int(buf_, epoch_us);
  buf_ += "}},\n";
  buf_ += R"({"name": "process_sort_index", "ph": "M", "pid": 0, "args": {"sort_index": 0}},)";
  buf_ += "\n";
  write_out();
  mark_cycles_.store(mark_cycles);
  active_.store(true);
}

void Timeline::stop() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!file_) return;
  active_.store(false);
  buf_ += "{}]\n";
  write_out();
  std::fclose(file_);
  file_ = nullptr;
}

int Timeline::row(const std::string& tensor) {
  auto it = rows_.find(tensor);
  if (it != rows_.end()) return it->second;
  int pid = static_cast<int>(rows_.size()) + 1;
  rows_.emplace(tensor, pid);
  buf_ += R"({"name": "process_name", "ph": "M", "pid": )";
  append_int(buf_, pid);
  buf_ += R"(, "args": {"name": ")";
  append_escaped(buf_, tensor);
  buf_ += "\"}},\n";
  buf_ += R"({"name": "process_sort_index", "ph": "M", "pid": )";
  append_int(buf_, pid);
  buf_ += R"(, "args": {"sort_index": )";
  append_int(buf_, pid);
  buf_ += "}},\n";
  return pid;
}

void Timeline::event(char ph, const char* name, int pid, const char* extra, long long ts) {
  if (ts < 0)
    ts = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0_).count();
  buf_ += R"({"ph": ")";
  buf_ += ph;
  buf_ += R"(", "name": ")";
  buf_ += name;
  buf_ += R"(", "ts": )";
  append_int(buf_, ts);
  buf_ += R"(, "pid": )";
  append_int(buf_, pid);
  buf_ += extra;
  buf_ += "},\n";
  if (buf_.size() > kFlushBytes) write_out();
}

void Timeline::write_out() {
  if (file_ && !buf_.empty()) {
    std::fwrite(buf_.data(), 1, buf_.size(), file_);
    std::fflush(file_);
  }
  buf_.clear();
  last_write_ = std::chrono::steady_clock::now();
}

void Timeline::negotiate_start(const std::string& tensor, OpType op) {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (file_) event('B', negotiate_phase(op), row(tensor));
}

void Timeline::rank_ready(const std::string& tensor, int rank) {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (!file_) return;
  char name[16];
  auto res = std::to_chars(name, name + sizeof(name) - 1, rank);
  *res.ptr = '\0';
  event('X', name, row(tensor), R"(, "dur": 0)");
}

void Timeline::negotiate_end(const std::string& tensor, OpType op) {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (file_) event('E', negotiate_phase(op), row(tensor));
}

void Timeline::begin(const std::vector<const std::string*>& tensors, const char* phase) {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (!file_) return;
  long long ts = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0_).count();
  for (const std::string* t : tensors) event('B', phase, row(*t), "", ts);
}

void Timeline::end(const std::vector<const std::string*>& tensors) {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (!file_) return;
  long long ts = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0_).count();
  for (const std::string* t : tensors) event('E', "", row(*t), "", ts);
}

void Timeline::end_op(const std::string& tensor, const Request& q) {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (!file_) return;
  std::string args = R"(, "args": {"dtype": ")";
  args += dtype_name(q.dtype);
  args += R"(", "shape": "[)";
  for (size_t i = 0; i < q.shape.size(); ++i) {
    if (i) args += ", ";
    append_int(args, q.shape[i]);
  }
  args += "]\"}";
  event('E', op_phase(q.op), row(tensor), args.c_str());
}

void Timeline::cycle_start() {
  if (!active() || !marks_cycles()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (file_) event('i', "CYCLE_START", 0, R"(, "s": "g")");
}

void Timeline::maybe_flush() {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (std::chrono::duration<double>(std::chrono::steady_clock::now() - last_write_).count() >= kFlushSeconds)
    write_out();
}

}  // namespace ring
