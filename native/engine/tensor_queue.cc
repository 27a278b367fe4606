#include "engine/tensor_queue.h"

#include "common/error.h"

namespace ring {

void TensorQueue::push(Entry entry) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!in_flight_.insert(entry.req.name).second)
    throw_error(ErrorKind::BadArgument, "a tensor named '" + entry.req.name +
                                            "' is already in flight on this rank; names must be unique until "
                                            "synchronized");
  entries_.push_back(std::move(entry));
  count_.store(entries_.size(), std::memory_order_release);
}

std::vector<Entry> TensorQueue::take_all() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Entry> out;
  out.swap(entries_);
  count_.store(0, std::memory_order_release);
  return out;
}

void TensorQueue::release_name(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  in_flight_.erase(name);
}

}  // namespace ring
