// TensorQueue: operations enqueued by the front end, waiting for the
// background thread. Enqueue never blocks on communication. Names in flight
// are checked before, by the HandleTable (engine/handle_table.h).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/message.h"
#include "transport/doorbell.h"

namespace ring {

struct Entry {
  Request req;
  const void* input = nullptr;  // caller-owned, alive until the handle finishes
  void* output = nullptr;       // caller-owned, or null: the engine allocates
  int64_t handle = 0;
  // Tensors in GPU memory: an event recorded on the caller's stream at
  // enqueue (a CUevent, returned to its pool with the last copy of the
  // entry); the operation reads the input only after it. Null otherwise.
  std::shared_ptr<void> ready;
  uint64_t stream = 0;  // GPU tensors: the caller's CUstream (0: the legacy default stream)
  bool complete_at_enqueue = false;  // EnqueueArgs::complete_at_enqueue
};

class TensorQueue {
 public:
  // Appends `entries` in order, under one lock; wake: notify a thread
  // blocked in wait_new() or on the doorbell (once for all of them).
  void push(std::vector<Entry> entries, bool wake = true);
  std::vector<Entry> take_all();
  // Names of the entries not yet taken by the background thread.
  std::vector<std::string> queued_names();
  // Cheap check for the background thread's wait loop.
  bool has_new() const { return count_.load(std::memory_order_acquire) > 0; }
  // Blocks until an entry is pushed, notify() is called or timeout_s passes.
  void wait_new(double timeout_s);
  // Blocks until notify() is called or timeout_s passes (queued entries do
  // not end the wait: someone else is taking them).
  void wait_notified(double timeout_s);
  void notify();
  // Also rings `bell` (doorbell.h) on a waking push and on notify(), for a
  // background thread that sleeps there. Set before the thread starts.
  void set_doorbell(Doorbell* bell) { bell_ = bell; }
  // An entry is queued, or notify() was called since the last wait_new()
  // or clear_notified().
  bool has_news() const { return has_new() || notified_.load(std::memory_order_acquire); }
  void clear_notified() { notified_.store(false, std::memory_order_relaxed); }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<bool> notified_{false};
  Doorbell* bell_ = nullptr;
  std::vector<Entry> entries_;
  std::atomic<size_t> count_{0};
};

}  // namespace ring
