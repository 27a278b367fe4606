// Finalizer: a thread that completes the handles of GPU work once the
// event recorded after it has fired, so the engine's thread can queue the
// next operation meanwhile. Operations complete in the order they were
// added. While it waits it also asks NCCL whether a communicator of the
// operation failed (gpu_wait.h), and fails the operation's handles with
// NCCL's reason; the first such failure is kept for the engine, which ends
// the job with it on every rank (failure()).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/handle_table.h"
#include "engine/op_timeline.h"
#include "gpu/gpu_wait.h"
#include "gpu/nccl.h"

namespace ring::gpu {

struct GpuWork {
  int device = 0;
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
  // Nothing queued or waited for; mu_ is held.
  bool idle() const { return queue_.empty() && busy_ == 0; }
  void loop();
  // Waits for w's event; false (and `failure` filled) when the work failed.
  bool wait(const GpuWork& w, GpuFailure* failure);

  HandleTable* handles_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<GpuWork> queue_;  // guarded by mu_
  size_t busy_ = 0;            // works taken but not finished; guarded by mu_
  ncclComm_t busy_comm_ = nullptr;  // the communicator of the work taken; guarded by mu_
  bool stop_ = false;          // guarded by mu_
  GpuFailure failure_;         // guarded by mu_; reported once
  std::atomic<bool> failed_{false};  // failure_ waits to be reported
  std::atomic<bool> aborted_{false};
  std::mutex poll_mu_;  // held by the thread across one look at a work (poll_work)
  std::thread thread_;
};

}  // namespace ring::gpu
