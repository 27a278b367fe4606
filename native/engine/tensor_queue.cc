#include "engine/tensor_queue.h"

#include <chrono>

namespace ring {

void TensorQueue::push(std::vector<Entry> entries, bool wake) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (entries_.empty()) {
      entries_.swap(entries);
    } else {
      for (Entry& e : entries) entries_.push_back(std::move(e));
    }
    count_.store(entries_.size(), std::memory_order_release);
  }
  // Notified after unlocking: a woken thread does not block on mu_ at once.
  if (wake) {
    cv_.notify_one();
    ring_doorbell(bell_);
  }
}

void TensorQueue::wait_new(double timeout_s) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] { return !entries_.empty() || notified_.load(); });
  notified_.store(false);
}

void TensorQueue::wait_notified(double timeout_s) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] { return notified_.load(); });
  notified_.store(false);
}

void TensorQueue::notify() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    notified_.store(true);
  }
  cv_.notify_one();
  ring_doorbell(bell_);
}

std::vector<Entry> TensorQueue::take_all() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Entry> out;
  out.swap(entries_);
  count_.store(0, std::memory_order_release);
  return out;
}

std::vector<std::string> TensorQueue::queued_names() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> names;
  names.reserve(entries_.size());
  for (const Entry& e : entries_) names.push_back(e.req.name);
  return names;
}

}  // namespace ring
