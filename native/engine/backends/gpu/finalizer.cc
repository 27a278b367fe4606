#include "engine/backends/gpu/finalizer.h"

#include <algorithm>
#include <chrono>

namespace ring::gpu {
namespace {

using Clock = std::chrono::steady_clock;

// A wait spins (looks without pausing) this long, then pauses between looks
// from kFirstPause doubling up to kLongestPause: small operations complete
// within microseconds of their event, long ones cost a look every 100 us.
constexpr auto kSpin = std::chrono::microseconds(50);
constexpr auto kFirstPause = std::chrono::microseconds(2);
constexpr auto kLongestPause = std::chrono::microseconds(100);

}  // namespace

Finalizer::Finalizer(HandleTable* handles) : handles_(handles) {}

Finalizer::~Finalizer() {
  drain();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& [stream, s] : streams_) s->thread.join();
}

bool Finalizer::idle() const {
  for (const auto& [stream, s] : streams_)
    if (!s->queue.empty() || s->busy) return false;
  return true;
}

void Finalizer::add(GpuWork work) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::unique_ptr<Stream>& s = streams_[work.stream];
    if (!s) {
      s = std::make_unique<Stream>();
      s->thread = std::thread([this, p = s.get()] { loop(p); });
    }
    s->queue.push_back(std::move(work));
  }
  cv_.notify_all();
}

void Finalizer::abort() {
  aborted_.store(true);
  { std::lock_guard<std::mutex> wait_for_the_look_in_progress(poll_mu_); }
  cv_.notify_all();
}

void Finalizer::drain() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return idle(); });
}

bool Finalizer::drain_for(double timeout_seconds) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, std::chrono::duration<double>(timeout_seconds), [&] { return idle(); });
}

bool Finalizer::failure(GpuFailure* out) {
  if (!failed_.load()) return false;
  std::lock_guard<std::mutex> lock(mu_);
  if (!failed_.exchange(false)) return false;
  *out = failure_;
  return true;
}

bool Finalizer::uses(ncclComm_t comm) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [stream, s] : streams_) {
    if (s->busy && s->busy_comm == comm) return true;
    for (const GpuWork& w : s->queue)
      if (w.comm == comm) return true;
  }
  return false;
}

bool Finalizer::wait(const GpuWork& w, GpuFailure* failure) {
  ScopedDevice current(w.device);
  CUevent event = static_cast<CUevent>(w.done.get());
  const auto start = Clock::now();
  auto pause = kFirstPause;
  while (true) {
    WorkState state;
    {
      std::lock_guard<std::mutex> look(poll_mu_);  // abort() waits for it: no look after
      if (aborted_.load()) {
        *failure = {ErrorKind::Internal, "the job failed while this GPU operation was in flight"};
        return false;
      }
      state = poll_work(event, w.comm, failure);
    }
    if (state != WorkState::Running) return state == WorkState::Done;
    if (Clock::now() - start < kSpin) continue;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, kLongestPause);
  }
}

void Finalizer::finish(GpuWork& w, bool done, const GpuFailure& failure) {
  if (done) OpTimeline::finish(w.timeline);
  for (size_t i = 0; i < w.handles.size(); ++i) {
    if (w.handles[i] == 0) continue;
    if (done)
      handles_->complete(w.handles[i], std::move(w.results[i]));
    else
      handles_->fail(w.handles[i], failure.kind, failure.reason);
  }
  w = GpuWork{};  // frees what the work kept, outside the lock
  std::lock_guard<std::mutex> lock(mu_);
  if (!done && !aborted_.load() && failure_.reason.empty()) {
    failure_ = failure;
    failed_.store(true);
  }
}

void Finalizer::loop(Stream* s) {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stop_ || !s->queue.empty(); });
    if (s->queue.empty()) return;  // stop_ and nothing left
    GpuWork w = std::move(s->queue.front());
    s->queue.pop_front();
    s->busy = true;
    s->busy_comm = w.comm;
    lock.unlock();
    GpuFailure failure;
    bool done = false;
    try {
      done = wait(w, &failure);
    } catch (const RingError& e) {
      failure = {e.kind(), e.what()};
    }
    finish(w, done, failure);
    lock.lock();
    s->busy = false;
    s->busy_comm = nullptr;
    cv_.notify_all();
  }
}

}  // namespace ring::gpu
