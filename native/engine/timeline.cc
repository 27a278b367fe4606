#include "engine/timeline.h"

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

#include "common/error.h"
#include "common/log.h"

namespace ring {
namespace {

constexpr auto kWriteEvery = std::chrono::milliseconds(100);
// Blocks are reserved for the file this far ahead of its text
// (FALLOC_FL_KEEP_SIZE: readers see only what is written). On ext4 a write
// into reserved blocks skips the allocator's bookkeeping for every block,
// a third of the write's kernel time; stop() gives back what is unused.
constexpr off_t kReserveAhead = 16 << 20;
// A batch this large wakes the writer early; one this large makes the
// engine wait for the writer, so memory stays bounded.
constexpr size_t kWakeBytes = 2 << 20;
constexpr size_t kMaxBytes = 32 << 20;
constexpr size_t kReserveEvents = 1 << 13;  // room kept in each batch
// The writer yields to every other thread of the machine (SCHED_IDLE): it
// writes in the gaps the training leaves, and a rank's thread that wakes
// takes the core back at once instead of waiting out the writer's time
// slice, which on a busy host delays a step by far more than the writing
// itself costs. Where that policy is refused, the lowest nice level.
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
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    throw_error(ErrorKind::BadArgument, "cannot write the timeline to '" + path + "': " + std::strerror(errno));
  long long epoch_us = std::chrono::duration_cast<std::chrono::microseconds>(
                           std::chrono::system_clock::now().time_since_epoch()).count();
  std::lock_guard<std::mutex> lock(mu_);
  fd_ = fd;
  written_ = reserved_ = 0;
  reserve_ = true;
  format_timeline_header(epoch_us, &text_);
  text_.flush();
  ++file_number_;
  rows_.clear();
  row_names_.clear();
  last_row_ = 0;
  batch_.clear();
  open_group_ = kNoGroup;
  batch_.events.reserve(kReserveEvents);
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
  text_.append("{}]\n", 4);
  text_.flush();
  if (fd_ >= 0 && reserved_ > written_ && ::ftruncate(fd_, static_cast<off_t>(written_)) != 0)
    log_line(LogLevel::Debug, std::string("the timeline keeps blocks reserved past its end: ") + std::strerror(errno));
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void Timeline::write_loop() {
  sched_param idle{};
  if (pthread_setschedparam(pthread_self(), SCHED_IDLE, &idle) != 0)
    setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), kWriterNice);  // this thread only
  pthread_setname_np(pthread_self(), "ring-timeline");  // as top -H and ps -L show it
  TimelineBatch taken;  // swapped with batch_: both end up with room for a batch
  taken.events.reserve(kReserveEvents);
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    wake_.wait_for(lock, kWriteEvery, [this] { return stopping_ || batch_.bytes() >= kWakeBytes; });
    const bool last = stopping_;
    taken.clear();
    std::swap(taken, batch_);  // both keep their capacity: no allocation in steady state
    open_group_ = kNoGroup;
    room_.notify_all();
    lock.unlock();
    format_timeline_batch(taken, &text_);
    text_.flush();  // readable at most ~kWriteEvery behind
    lock.lock();
    if (last) return;
  }
}

void Timeline::write_file(const char* data, size_t size) {
  if (fd_ >= 0 && reserve_ && written_ + size > reserved_) {
    // Failing (a file system without it, a full disk) only costs the saving.
    reserve_ = ::fallocate(fd_, FALLOC_FL_KEEP_SIZE, static_cast<off_t>(written_), kReserveAhead) == 0;
    if (reserve_) reserved_ = written_ + kReserveAhead;
  }
  written_ += size;
  while (fd_ >= 0 && size > 0) {
    const ssize_t n = ::write(fd_, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {  // disk full or the like: the engine goes on without its timeline
      log_line(LogLevel::Error, std::string("the timeline stops being written: ") + std::strerror(errno));
      ::close(fd_);
      fd_ = -1;
      return;
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
}

long long Timeline::now_us() const {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0_).count();
}

std::unique_lock<std::mutex> Timeline::record_lock() {
  std::unique_lock<std::mutex> lock(mu_);
  if (batch_.bytes() >= kMaxBytes) {
    wake_.notify_all();
    room_.wait(lock, [this] { return !recording_ || batch_.bytes() < kMaxBytes; });
  }
  return lock;
}

void Timeline::push(char kind, const char* name, int row, long long ts, int32_t arg) {
  auto& events = batch_.events;
  // The batch's memory was last touched by the writer a while ago: asking
  // for the cache line 512 bytes ahead hides the misses of filling it.
  __builtin_prefetch(events.data() + events.size() + 16, 1);
  events.push_back(TimelineEvent{ts, name, row, arg, kind});
  if (batch_.bytes() >= kWakeBytes) wake_.notify_one();
}

int32_t Timeline::group(const int* rows, size_t count) {
  const auto offset = static_cast<int32_t>(batch_.groups.size());
  batch_.groups.push_back(static_cast<int32_t>(count));
  batch_.groups.insert(batch_.groups.end(), rows, rows + count);
  return -1 - offset;
}

void Timeline::add_to_group(char kind, const char* name, int row, long long ts, int32_t arg) {
  auto& events = batch_.events;
  if (open_group_ + 1 == events.size()) {
    const TimelineEvent& last = events.back();
    if (last.kind == kind && last.name == name && last.ts == ts && last.arg == arg) {
      ++batch_.groups[static_cast<size_t>(-1 - last.row)];
      batch_.groups.push_back(row);
      return;
    }
  }
  push(kind, name, group(&row, 1), ts, arg);
  open_group_ = events.size() - 1;
}

int Timeline::row(const std::string& tensor, Row* cache) {
  if (cache && cache->file == file_number_) return cache->id;
  int id;
  if (static_cast<size_t>(last_row_) < row_names_.size() && row_names_[last_row_] == tensor) {
    id = last_row_ + 1;  // the tensor after the last one, as in the step before
  } else if (auto it = rows_.find(tensor); it != rows_.end()) {
    id = it->second;
  } else {
    id = static_cast<int>(row_names_.size()) + 1;
    rows_.emplace(tensor, id);
    row_names_.push_back(tensor);
    batch_.names.push_back(tensor);
    push('M', nullptr, id, 0, static_cast<int32_t>(batch_.names.size() - 1));
  }
  last_row_ = id;
  if (cache) *cache = Row{id, file_number_};
  return id;
}

void Timeline::rank_ready(const std::string& tensor, Row* cache, OpType op, int rank, bool first, long long ts) {
  if (!active()) return;
  std::unique_lock<std::mutex> lock = record_lock();
  if (!recording_) return;
  int r = row(tensor, cache);
  if (ts < 0) ts = now_us();
  if (first) {
    add_to_group('R', negotiate_phase(op), r, ts, rank);
  } else {
    add_to_group('I', nullptr, r, ts, rank);
  }
}

void Timeline::negotiate_end(const std::string& tensor, Row* cache, long long ts) {
  if (!active()) return;
  std::unique_lock<std::mutex> lock = record_lock();
  if (!recording_) return;
  const int r = row(tensor, cache);
  add_to_group('E', nullptr, r, ts < 0 ? now_us() : ts);
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
  push('B', phase, group(rows.data(), rows.size()), now_us());
}

void Timeline::span(const std::vector<int>& rows, const char* phase, long long began) {
  if (!active() || began < 0) return;
  std::unique_lock<std::mutex> lock = record_lock();
  if (!recording_) return;
  const auto dur = static_cast<int32_t>(std::min<long long>(now_us() - began, INT32_MAX));
  push('S', phase, group(rows.data(), rows.size()), began, dur);
}

void Timeline::end_ops(const std::vector<int>& rows, const std::vector<const Request*>& requests) {
  if (!active()) return;
  std::unique_lock<std::mutex> lock = record_lock();
  if (!recording_) return;
  if (rows.empty() || rows.size() != requests.size()) return;
  push('e', op_phase(requests[0]->op), group(rows.data(), rows.size()), now_us(),
       static_cast<int32_t>(batch_.dims.size()));
  for (const Request* q : requests) {
    batch_.dims.push_back(static_cast<int64_t>(q->dtype));
    batch_.dims.push_back(static_cast<int64_t>(q->shape.size()));
    batch_.dims.insert(batch_.dims.end(), q->shape.begin(), q->shape.end());
  }
}

void Timeline::cycle_start() {
  if (!active() || !marks_cycles()) return;
  std::unique_lock<std::mutex> lock = record_lock();
  if (recording_) push('C', "CYCLE_START", 0, now_us());
}

}  // namespace ring
