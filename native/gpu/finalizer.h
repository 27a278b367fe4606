// Finalizer: a thread that completes the handles of GPU work once the
// event recorded after it has fired, so the engine's thread can queue the
// next operation meanwhile. Operations complete in the order they were
// added. While it waits it also asks NCCL whether a communicator of the
// operation failed, and fails the operation's handles with NCCL's reason.
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
#include "gpu/nccl.h"

namespace ring::gpu {

struct GpuWork {
  int device = 0;
  std::shared_ptr<void> done;  // a CUevent recorded after the work (device_streams.h)
  ncclComm_t comm = nullptr;   // checked for asynchronous errors while waiting
  std::vector<int64_t> handles;  // 0: a stand-in, nothing to complete
  std::vector<OpResult> results;  // results[i] completes handles[i]
  std::vector<std::shared_ptr<void>> keep;  // alive until the work is done (inputs' events, scratch)
};

class Finalizer {
 public:
  explicit Finalizer(HandleTable* handles);
  // Waits for the work added so far, then stops the thread.
  ~Finalizer();
  void add(GpuWork work);
  // Blocks until every work added so far is done or failed.
  void drain();
  // Stops waiting for GPU work: what is queued or waited for fails (the
  // job failed; its handles already have their error). Any thread.
  void abort();

 private:
  void loop();
  // Waits for w's event; "" when it fired, else why the work failed.
  std::string wait(const GpuWork& w);

  HandleTable* handles_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<GpuWork> queue_;  // guarded by mu_
  size_t busy_ = 0;            // works taken but not finished; guarded by mu_
  bool stop_ = false;          // guarded by mu_
  std::atomic<bool> aborted_{false};
  std::thread thread_;
};

}  // namespace ring::gpu
