// HandleTable: the state of every enqueued operation, from enqueue to the
// front end's synchronize(). The background thread completes or fails a
// handle; callers wait on a condition variable (the binding releases the
// GIL first), never in a busy spin. The table also owns the names in
// flight on this rank: a name is taken from create() until its operation
// completes or fails, so a duplicate is rejected only while the first is
// still being processed.
//
// States live in reused slots: a handle is (generation << 32) | slot, the
// generation counting the slot's uses from 1 (below 2^31), so a handle is
// never 0 (the joined rank's stand-in) and one released before is never
// mistaken for the slot's current one.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include "common/device.h"
#include "common/error.h"

namespace ring {

// What a finished operation hands back. `data` is set when the engine
// allocated the output (allgather, alltoall, or when no output was given).
struct OpResult {
  std::shared_ptr<std::vector<uint8_t>> data;
  std::vector<int64_t> shape;
  std::vector<int64_t> received_splits;  // alltoall: rows received from each rank
  // A result the engine allocated in GPU memory instead of `data` (the
  // NCCL backend's allgather and alltoall): the CUdeviceptr, freed with the
  // last copy; its bytes; its GPU.
  std::shared_ptr<void> device_data;
  size_t device_bytes = 0;
  Device device;
  // With RING_ENABLE_ASYNC_COMPLETION the handle completes before the GPU
  // has written device_data: the CUevent that fires once it has (a
  // consumer's stream waits for it: gpu/device_streams.h). Null otherwise.
  std::shared_ptr<void> device_ready;
};

class HandleTable {
 public:
  // `name`: the tensor's name, taken until the operation completes or
  // fails. Throws RingError(BadArgument) when it is already taken.
  int64_t create(const std::string& name = "");
  // One handle per name, in order, or none: throws RingError(BadArgument)
  // naming the first name that is taken or appears twice in `names`.
  std::vector<int64_t> create_all(const std::vector<std::string>& names);
  // A handle the table does not know (0: a joined rank's stand-in) or that
  // already finished is left alone.
  void complete(int64_t handle, OpResult result);
  // complete() of handles[i] with results[i] (moved from), under one lock
  // and with one wake-up of the waiters.
  void complete_all(const std::vector<int64_t>& handles, std::vector<OpResult>& results);
  // fail() and fail_all() with `callbacks` false leave the callbacks they
  // make due to a later run_callbacks() (a caller holding a lock a
  // callback may need).
  void fail(int64_t handle, ErrorKind kind, const std::string& message, bool callbacks = true);
  // Fails every unfinished handle (lost peer, shutdown).
  void fail_all(ErrorKind kind, const std::string& message, bool callbacks = true);
  // Runs the on_finish callbacks of finished handles not run yet (the
  // caller holds no lock a callback may take).
  void run_callbacks();

  // True when finished (successfully or not). Unknown handle: BadArgument.
  bool poll(int64_t handle);
  // How many handles have finished so far, without the lock: a poller
  // needs to poll() again only once this has moved.
  uint64_t finished_count() const { return finished_.load(std::memory_order_acquire); }
  // The index of the first unfinished handle of handles[from...], under one
  // lock; handles.size() when all have finished. Unknown handle: BadArgument.
  size_t first_unfinished(const std::vector<int64_t>& handles, size_t from = 0);
  // Blocks until finished, or until timeout_s (< 0: forever); returns false
  // on timeout.
  bool wait(int64_t handle, double timeout_s = -1.0);
  // Removes a finished handle: returns its result or throws its error.
  OpResult release(int64_t handle);
  // Removes every handle of `handles` (all finished, else BadArgument and
  // none is removed) and returns their results in order; when some failed,
  // throws the first one's error once all are removed.
  std::vector<OpResult> release_all(const std::vector<int64_t>& handles);
  // True when the name of some unfinished operation starts with `prefix`.
  bool has_name_prefix(const std::string& prefix) const;
  // Blocks until no unfinished operation's name starts with `prefix`
  // (true), or until timeout_s passed (false).
  bool wait_no_name_prefix(const std::string& prefix, double timeout_s);
  // Forgets a handle whatever its state (an enqueue that was rejected),
  // freeing its name.
  void discard(int64_t handle);
  // Calls `fn` once `handle` has finished (completed or failed): at once,
  // on this thread, when it already has; otherwise on the thread that
  // finishes it, after the table's lock is released (so `fn` may release
  // the handle). One callback per handle; BadArgument for an unknown
  // handle or a second callback. Callbacks never run under the lock.
  void on_finish(int64_t handle, std::function<void()> fn);

 private:
  struct State {
    uint32_t gen = 0;  // of the handle using the slot
    bool live = false;
    bool done = false;
    bool failed = false;
    ErrorKind kind = ErrorKind::Internal;
    std::string message;
    OpResult result;
    std::string name;
    std::function<void()> callback;  // on_finish's, until it is due
  };
  // The live state of `handle`, or null.
  State* lookup(int64_t handle);
  // lookup(), or RingError(BadArgument) for an unknown handle.
  State& find(int64_t handle);
  // Frees s's slot for reuse.
  void remove(State& s);
  // complete() of one handle (result moved from); the caller holds mu_.
  void complete_locked(int64_t handle, OpResult& result);
  // has_name_prefix(); the caller holds mu_.
  bool has_name_prefix_locked(const std::string& prefix) const;
  // Marks `s` finished and frees its name, moving its callback to due_;
  // the caller holds mu_.
  void finish_locked(State& s);

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<uint64_t> finished_{0};  // bumped by finish_locked, after `done`
  std::vector<State> slots_;
  std::vector<uint32_t> free_;  // slots not in use
  std::unordered_set<std::string> in_flight_;  // names of unfinished handles
  std::vector<std::function<void()>> due_;  // callbacks of finished handles, not run yet
  std::atomic<bool> any_due_{false};  // due_ is not empty (read without the lock)
};

}  // namespace ring
