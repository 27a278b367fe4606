// Finalizer: threads that complete the handles of GPU work once the event
// recorded after it has fired, so the engine's thread can queue the next
// operation meanwhile. One thread per stream the work runs on (started
// with the stream's first work): operations of a stream complete in the
// order they were added, and one that waits long holds up no other
// stream's. Each wait spins on the event for its first microseconds (a
// small operation completes within a few microseconds of its event), then
// looks less and less often. While it waits it also asks NCCL whether a
// communicator of the operation failed (gpu_wait.h), and fails the
// operation's handles with NCCL's reason; the first such failure is kept
// for the engine, which ends the job with it on every rank (failure()).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/backends/gpu/gpu_wait.h"
#include "engine/handle_table.h"
#include "engine/op_timeline.h"
#include "gpu/nccl.h"

namespace ring::gpu {

struct GpuWork {
  int device = 0;
  CUstream stream = nullptr;   // the stream the work runs on: its thread waits for it
  std::shared_ptr<void> done;  // a CUevent recorded after the work (device_streams.h)
  ncclComm_t comm = nullptr;   // checked for asynchronous errors while waiting
  std::vector<int64_t> handles;  // 0: a stand-in, nothing to complete
  std::vector<OpResult> results;  // results[i] completes handles[i]
  std::vector<std::shared_ptr<void>> keep;  // alive until the work is done (inputs' events, scratch)
  OpTimeline::Deferred timeline;  // closed when the work is done
};

class Finalizer {
 public:
  explicit Finalizer(HandleTable* handles);
  // Waits for the work added so far, then stops the thread.
  ~Finalizer();
  void add(GpuWork work);
  // Blocks until every work added so far is done or failed.
  void drain();
  // drain(), for at most `timeout_seconds`: false when work is left.
  bool drain_for(double timeout_seconds);
  // Stops waiting for GPU work: what is queued or waited for fails (the
  // job failed; its handles already have their error). Any thread. When it
  // returns the thread is in no NCCL or CUDA call and makes none for
  // work added so far, so the communicators may be aborted (freed) next.
  void abort();
  // The first failure of GPU work (not counting work failed by abort()),
  // once: true and `out` filled the first time it is asked after one.
  bool failure(GpuFailure* out);
  // True while work on `comm` is queued or waited for. Any thread.
  bool uses(ncclComm_t comm);

 private:
  struct Stream {  // one stream's work and the thread that waits for it
    std::deque<GpuWork> queue;
    bool busy = false;                // a work was taken and is not finished
    ncclComm_t busy_comm = nullptr;   // its communicator
    std::thread thread;
  };
  // Nothing queued or waited for on any stream; mu_ is held.
  bool idle() const;
  void loop(Stream* s);
  // Waits for w's event; false (and `failure` filled) when the work failed.
  bool wait(const GpuWork& w, GpuFailure* failure);
  // Completes or fails w's handles; records the first failure.
  void finish(GpuWork& w, bool done, const GpuFailure& failure);

  HandleTable* handles_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<CUstream, std::unique_ptr<Stream>> streams_;  // guarded by mu_; never erased before the destructor
  bool stop_ = false;          // guarded by mu_
  GpuFailure failure_;         // guarded by mu_; reported once
  std::atomic<bool> failed_{false};  // failure_ waits to be reported
  std::atomic<bool> aborted_{false};
  std::mutex poll_mu_;  // held by a thread across one look at a work (poll_work)
};

}  // namespace ring::gpu
