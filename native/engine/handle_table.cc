#include "engine/handle_table.h"

#include <chrono>

namespace ring {

int64_t HandleTable::create(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!in_flight_.insert(name).second)
    throw_error(ErrorKind::BadArgument, "a tensor named '" + name +
                                            "' is already in flight on this rank; a name is free again once its "
                                            "operation has completed");
  int64_t h = next_++;
  State s;
  s.name = name;
  states_.emplace(h, std::move(s));
  return h;
}

HandleTable::State& HandleTable::find(int64_t handle) {
  auto it = states_.find(handle);
  if (it == states_.end())
    throw_error(ErrorKind::BadArgument, "unknown handle " + std::to_string(handle) + " (already synchronized?)");
  return it->second;
}

void HandleTable::finish_locked(State& s) {
  s.done = true;
  in_flight_.erase(s.name);
}

void HandleTable::complete(int64_t handle, OpResult result) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = states_.find(handle);
    if (it == states_.end() || it->second.done) return;
    finish_locked(it->second);
    it->second.result = std::move(result);
  }
  cv_.notify_all();
}

void HandleTable::fail(int64_t handle, ErrorKind kind, const std::string& message) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = states_.find(handle);
    if (it == states_.end() || it->second.done) return;
    finish_locked(it->second);
    it->second.failed = true;
    it->second.kind = kind;
    it->second.message = message;
  }
  cv_.notify_all();
}

void HandleTable::fail_all(ErrorKind kind, const std::string& message) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [h, s] : states_) {
      if (s.done) continue;
      finish_locked(s);
      s.failed = true;
      s.kind = kind;
      s.message = message;
    }
  }
  cv_.notify_all();
}

bool HandleTable::poll(int64_t handle) {
  std::lock_guard<std::mutex> lock(mu_);
  return find(handle).done;
}

bool HandleTable::wait(int64_t handle, double timeout_s) {
  std::unique_lock<std::mutex> lock(mu_);
  find(handle);
  auto done = [&] {
    auto it = states_.find(handle);
    return it == states_.end() || it->second.done;
  };
  if (timeout_s < 0) {
    cv_.wait(lock, done);
    return true;
  }
  return cv_.wait_for(lock, std::chrono::duration<double>(timeout_s), done);
}

OpResult HandleTable::release(int64_t handle) {
  std::lock_guard<std::mutex> lock(mu_);
  State& s = find(handle);
  if (!s.done) throw_error(ErrorKind::BadArgument, "handle " + std::to_string(handle) + " is not finished");
  State copy = std::move(s);
  states_.erase(handle);
  if (copy.failed) throw RingError(copy.kind, copy.message);
  return std::move(copy.result);
}

void HandleTable::discard(int64_t handle) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = states_.find(handle);
  if (it == states_.end()) return;
  if (!it->second.done) in_flight_.erase(it->second.name);
  states_.erase(it);
}

bool HandleTable::has_name_prefix(const std::string& prefix) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const std::string& name : in_flight_)
    if (name.compare(0, prefix.size(), prefix) == 0) return true;
  return false;
}

}  // namespace ring
