#include "gpu/finalizer.h"

#include <chrono>

namespace ring::gpu {

Finalizer::Finalizer(HandleTable* handles) : handles_(handles), thread_([this] { loop(); }) {}

Finalizer::~Finalizer() {
  drain();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Finalizer::add(GpuWork work) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(work));
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
  return cv_.wait_for(lock, std::chrono::duration<double>(timeout_seconds),
                      [&] { return idle(); });
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
  if (busy_ > 0 && busy_comm_ == comm) return true;
  for (const GpuWork& w : queue_)
    if (w.comm == comm) return true;
  return false;
}

bool Finalizer::wait(const GpuWork& w, GpuFailure* failure) {
  ScopedDevice current(w.device);
  CUevent event = static_cast<CUevent>(w.done.get());
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
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

void Finalizer::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_ and nothing left
    GpuWork w = std::move(queue_.front());
    queue_.pop_front();
    ++busy_;
    busy_comm_ = w.comm;
    lock.unlock();
    GpuFailure failure;
    bool done = false;
    try {
      done = wait(w, &failure);
    } catch (const RingError& e) {
      failure = {e.kind(), e.what()};
    }
    if (done) OpTimeline::finish(w.timeline);
    for (size_t i = 0; i < w.handles.size(); ++i) {
      if (w.handles[i] == 0) continue;
      if (done)
        handles_->complete(w.handles[i], std::move(w.results[i]));
      else
        handles_->fail(w.handles[i], failure.kind, failure.reason);
    }
    w = GpuWork{};  // frees what the work kept, outside the lock
    lock.lock();
    if (!done && !aborted_.load() && failure_.reason.empty()) {
      failure_ = failure;
      failed_.store(true);
    }
    --busy_;
    busy_comm_ = nullptr;
    cv_.notify_all();
  }
}

}  // namespace ring::gpu
