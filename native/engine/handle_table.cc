#include "engine/handle_table.h"

#include <algorithm>
#include <chrono>
#include <optional>

namespace ring {

int64_t HandleTable::create(const std::string& name) { return create_all({name})[0]; }

std::vector<int64_t> HandleTable::create_all(const std::vector<std::string>& names) {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < names.size(); ++i) {
    if (!in_flight_.insert(names[i]).second) {
      const bool twice = std::find(names.begin(), names.begin() + i, names[i]) != names.begin() + i;
      for (size_t k = 0; k < i; ++k) in_flight_.erase(names[k]);  // nothing is taken
      throw_error(ErrorKind::BadArgument,
                  "a tensor named '" + names[i] +
                      (twice ? "' appears twice in one group; names must be unique while in flight"
                             : "' is already in flight on this rank; a name is free again once its "
                               "operation has completed"));
    }
  }
  std::vector<int64_t> handles;
  handles.reserve(names.size());
  for (const std::string& name : names) {
    if (free_.empty()) {
      free_.push_back(static_cast<uint32_t>(slots_.size()));
      slots_.emplace_back();
    }
    const uint32_t slot = free_.back();
    free_.pop_back();
    State& s = slots_[slot];
    s.gen = s.gen >= 0x7fffffffu ? 1 : s.gen + 1;  // handles stay positive
    s.live = true;
    s.name = name;
    handles.push_back(static_cast<int64_t>(s.gen) << 32 | slot);
  }
  return handles;
}

HandleTable::State* HandleTable::lookup(int64_t handle) {
  const uint64_t slot = static_cast<uint64_t>(handle) & 0xffffffffu;
  const uint32_t gen = static_cast<uint32_t>(static_cast<uint64_t>(handle) >> 32);
  if (handle <= 0 || slot >= slots_.size()) return nullptr;
  State& s = slots_[slot];
  return s.live && s.gen == gen ? &s : nullptr;
}

HandleTable::State& HandleTable::find(int64_t handle) {
  State* s = lookup(handle);
  if (!s) throw_error(ErrorKind::BadArgument, "unknown handle " + std::to_string(handle) + " (already synchronized?)");
  return *s;
}

void HandleTable::remove(State& s) {
  s.live = s.done = s.failed = false;
  s.message.clear();
  s.result = OpResult{};
  s.callback = nullptr;
  free_.push_back(static_cast<uint32_t>(&s - slots_.data()));
}

void HandleTable::finish_locked(State& s) {
  s.done = true;
  in_flight_.erase(s.name);
  if (s.callback) {
    due_.push_back(std::move(s.callback));
    s.callback = nullptr;
    any_due_.store(true, std::memory_order_relaxed);
  }
  finished_.fetch_add(1, std::memory_order_release);
}

void HandleTable::run_callbacks() {
  if (!any_due_.load(std::memory_order_relaxed)) return;
  std::vector<std::function<void()>> due;
  {
    std::lock_guard<std::mutex> lock(mu_);
    due.swap(due_);
    any_due_.store(false, std::memory_order_relaxed);
  }
  for (auto& fn : due) fn();
}

void HandleTable::on_finish(int64_t handle, std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    State& s = find(handle);
    if (s.callback)
      throw_error(ErrorKind::BadArgument, "handle " + std::to_string(handle) + " already has a callback");
    if (!s.done) {
      s.callback = std::move(fn);
      return;
    }
  }
  fn();
}

void HandleTable::complete_locked(int64_t handle, OpResult& result) {
  State* s = lookup(handle);
  if (!s || s->done) return;
  finish_locked(*s);
  s->result = std::move(result);
}

void HandleTable::complete(int64_t handle, OpResult result) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    complete_locked(handle, result);
  }
  cv_.notify_all();
  run_callbacks();
}

void HandleTable::complete_all(const std::vector<int64_t>& handles, std::vector<OpResult>& results) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < handles.size(); ++i) complete_locked(handles[i], results[i]);
  }
  cv_.notify_all();
  run_callbacks();
}

void HandleTable::fail(int64_t handle, ErrorKind kind, const std::string& message, bool callbacks) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    State* s = lookup(handle);
    if (!s || s->done) return;
    finish_locked(*s);
    s->failed = true;
    s->kind = kind;
    s->message = message;
  }
  cv_.notify_all();
  if (callbacks) run_callbacks();
}

void HandleTable::fail_all(ErrorKind kind, const std::string& message, bool callbacks) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (State& s : slots_) {
      if (!s.live || s.done) continue;
      finish_locked(s);
      s.failed = true;
      s.kind = kind;
      s.message = message;
    }
  }
  cv_.notify_all();
  if (callbacks) run_callbacks();
}

bool HandleTable::poll(int64_t handle) {
  std::lock_guard<std::mutex> lock(mu_);
  return find(handle).done;
}

size_t HandleTable::first_unfinished(const std::vector<int64_t>& handles, size_t from) {
  std::lock_guard<std::mutex> lock(mu_);
  for (; from < handles.size(); ++from)
    if (!find(handles[from]).done) break;
  return from;
}

bool HandleTable::wait(int64_t handle, double timeout_s) {
  std::unique_lock<std::mutex> lock(mu_);
  find(handle);
  auto done = [&] {
    State* s = lookup(handle);
    return !s || s->done;
  };
  if (done()) return true;  // the usual case after drive(): no clock, no wait
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
  OpResult result = std::move(s.result);
  const bool failed = s.failed;
  const ErrorKind kind = s.kind;
  std::string message = std::move(s.message);
  remove(s);
  if (failed) throw RingError(kind, message);
  return result;
}

std::vector<OpResult> HandleTable::release_all(const std::vector<int64_t>& handles) {
  std::vector<int64_t> sorted = handles;
  std::sort(sorted.begin(), sorted.end());
  auto twice = std::adjacent_find(sorted.begin(), sorted.end());
  if (twice != sorted.end())
    throw_error(ErrorKind::BadArgument, "handle " + std::to_string(*twice) + " appears twice in one release");
  std::lock_guard<std::mutex> lock(mu_);
  for (int64_t h : handles)
    if (!find(h).done) throw_error(ErrorKind::BadArgument, "handle " + std::to_string(h) + " is not finished");
  std::vector<OpResult> results;
  results.reserve(handles.size());
  std::optional<RingError> first;
  for (int64_t h : handles) {
    State& s = find(h);
    if (s.failed && !first) first.emplace(s.kind, s.message);
    results.push_back(std::move(s.result));
    remove(s);
  }
  if (first) throw *first;
  return results;
}

void HandleTable::discard(int64_t handle) {
  std::lock_guard<std::mutex> lock(mu_);
  State* s = lookup(handle);
  if (!s) return;
  if (!s->done) in_flight_.erase(s->name);
  remove(*s);
}

bool HandleTable::has_name_prefix(const std::string& prefix) const {
  std::lock_guard<std::mutex> lock(mu_);
  return has_name_prefix_locked(prefix);
}

bool HandleTable::has_name_prefix_locked(const std::string& prefix) const {
  for (const std::string& name : in_flight_)
    if (name.compare(0, prefix.size(), prefix) == 0) return true;
  return false;
}

bool HandleTable::wait_no_name_prefix(const std::string& prefix, double timeout_s) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] { return !has_name_prefix_locked(prefix); });
}

}  // namespace ring
