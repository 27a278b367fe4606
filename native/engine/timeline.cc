#include "engine/timeline.h"

#include <pthread.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

#include "common/error.h"

namespace ring {
namespace {

constexpr auto kWriteEvery = std::chrono::milliseconds(100);
// A batch this large wakes the writer early; one this large (32 MiB) makes
// the engine wait for the writer, so memory stays bounded.
constexpr size_t kWakeEvents = 1 << 16;
constexpr size_t kMaxEvents = 1 << 20;
// The writer yields to every other thread of the machine: on a busy host it
// writes in the gaps the training leaves instead of delaying a step.
constexpr int kWriterNice = 19;

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
  std::FILE* file = std::fopen(path.c_str(), "w");
  if (!file)
    throw_error(ErrorKind::BadArgument, "cannot write the timeline to '" + path + "': " + std::strerror(errno));
  long long epoch_us = std::chrono::duration_cast<std::chrono::microseconds>(
                           std::chrono::system_clock::now().time_since_epoch()).count();
  std::string header;
  format_timeline_header(epoch_us, &header);
  std::lock_guard<std::mutex> lock(mu_);
  file_ = file;
  write_text(header);
  ++file_number_;
  rows_.clear();
  batch_.clear();
  t0_ = std::chrono::steady_clock::now();
  recording_ = true;
  stopping_ = false;
  mark_cycles_.store(mark_cycles);
  active_.store(true);
  writer_ = std::thread([this] { write_loop(); });
}

void Timeline::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!writer_.joinable()) return;
    active_.store(false);
    recording_ = false;
    stopping_ = true;
  }
  wake_.notify_all();
  room_.notify_all();
  writer_.join();  // it writes what was recorded, then leaves
  write_text("{}]\n");
  std::fclose(file_);
  file_ = nullptr;
}

void Timeline::write_loop() {
  setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), kWriterNice);  // this thread only
  pthread_setname_np(pthread_self(), "ring-timeline");  // as top -H and ps -L show it
  TimelineBatch taken;
  std::string text;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    wake_.wait_for(lock, kWriteEvery, [this] { return stopping_ || batch_.events.size() >= kWakeEvents; });
    const bool last = stopping_;
    taken.clear();
    std::swap(taken, batch_);  // both keep their capacity: no allocation in steady state
    room_.notify_all();
    lock.unlock();
    text.clear();
    format_timeline_batch(taken, &text);
    write_text(text);
    lock.lock();
    if (last) return;
  }
}

void Timeline::write_text(const std::string& text) {
  if (!file_ || text.empty()) return;
  std::fwrite(text.data(), 1, text.size(), file_);
  std::fflush(file_);
}

long long Timeline::now_us() const {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0_).count();
}

std::unique_lock<std::mutex> Timeline::record_lock() {
  std::unique_lock<std::mutex> lock(mu_);
  if (batch_.events.size() >= kMaxEvents) {
    wake_.notify_all();
    room_.wait(lock, [this] { return !recording_ || batch_.events.size() < kMaxEvents; });
  }
  return lock;
}

void Timeline::push(char kind, const char* name, int row, long long ts, int32_t arg) {
  batch_.events.push_back(TimelineEvent{ts, name, row, arg, kind});
  if (batch_.events.size() == kWakeEvents) wake_.notify_one();
}

int Timeline::row(const std::string& tensor, Row* cache) {
  if (cache && cache->file == file_number_) return cache->id;
  auto it = rows_.find(tensor);
  int id;
  if (it != rows_.end()) {
    id = it->second;
  } else {
    id = static_cast<int>(rows_.size()) + 1;
    rows_.emplace(tensor, id);
    batch_.names.push_back(tensor);
    push('M', nullptr, id, 0, static_cast<int32_t>(batch_.names.size() - 1));
  }
  if (cache) *cache = Row{id, file_number_};
  return id;
}

void Timeline::rank_ready(const std::string& tensor, Row* cache, OpType op, int rank, bool first, long long ts) {
  if (!active()) return;
  std::unique_lock<std::mutex> lock = record_lock();
  if (!recording_) return;
  int r = row(tensor, cache);
  if (ts < 0) ts = now_us();
  if (first) push('B', negotiate_phase(op), r, ts);
  push('I', nullptr, r, ts, rank);
}

void Timeline::negotiate_end(const std::string& tensor, Row* cache, long long ts) {
  if (!active()) return;
  std::unique_lock<std::mutex> lock = record_lock();
  if (recording_) push('E', nullptr, row(tensor, cache), ts < 0 ? now_us() : ts);
}

void Timeline::rows(const std::vector<const std::string*>& tensors, const std::vector<int32_t>& known,
                    uint64_t file, std::vector<int>* out) {
  out->clear();
  std::unique_lock<std::mutex> lock = record_lock();
  if (!recording_) return;
  if (file == file_number_ && known.size() == tensors.size()) {
    out->assign(known.begin(), known.end());
    return;
  }
  for (const std::string* t : tensors) out->push_back(row(*t, nullptr));
}

void Timeline::begin(const std::vector<int>& rows, const char* phase) {
  if (!active()) return;
  std::unique_lock<std::mutex> lock = record_lock();
  if (!recording_) return;
  long long ts = now_us();
  for (int r : rows) push('B', phase, r, ts);
}

void Timeline::span(const std::vector<int>& rows, const char* phase, long long began) {
  if (!active() || began < 0) return;
  std::unique_lock<std::mutex> lock = record_lock();
  if (!recording_) return;
  const auto dur = static_cast<int32_t>(std::min<long long>(now_us() - began, INT32_MAX));
  for (int r : rows) push('S', phase, r, began, dur);
}

void Timeline::end_ops(const std::vector<int>& rows, const std::vector<const Request*>& requests) {
  if (!active()) return;
  std::unique_lock<std::mutex> lock = record_lock();
  if (!recording_) return;
  long long ts = now_us();
  for (size_t i = 0; i < rows.size() && i < requests.size(); ++i) {
    const Request& q = *requests[i];
    push('e', op_phase(q.op), rows[i], ts, static_cast<int32_t>(batch_.dims.size()));
    batch_.dims.push_back(static_cast<int64_t>(q.dtype));
    batch_.dims.push_back(static_cast<int64_t>(q.shape.size()));
    batch_.dims.insert(batch_.dims.end(), q.shape.begin(), q.shape.end());
  }
}

void Timeline::cycle_start() {
  if (!active() || !marks_cycles()) return;
  std::unique_lock<std::mutex> lock = record_lock();
  if (recording_) push('C', "CYCLE_START", 0, now_us());
}

}  // namespace ring
