// Runtime: the one object that owns all of the engine's state for a job:
// configuration, the two meshes (control messages and data), the tensor
// queue, the handle table, the response cache and the background thread.
//
// Life cycle, driven by the Python front end:
//   Runtime rt(options);                 // parses Config from RING_*/HOROVOD_*
//   publish rt.local_endpoint(); gather every rank's; rt.connect(all);
//   (barrier) rt.start();                // background thread runs
//   h = rt.enqueue(...); rt.wait(h); rt.release(h);
//   rt.shutdown();
//
// The background thread: rank 0 runs the coordinator loop, other ranks the
// worker loop (runtime_loops.cc). Control messages travel on their own mesh
// so a request never interleaves with collective data on a byte stream.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/config.h"
#include "engine/executor.h"
#include "engine/handle_table.h"
#include "engine/response_cache.h"
#include "engine/tensor_queue.h"
#include "transport/mesh_builder.h"
#include "transport/waiter.h"

namespace ring {

struct RuntimeOptions {
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  int cross_rank = 0;
  int cross_size = 1;
  std::string secret;
  std::string job_id = "local";
  std::string host_id = "localhost";
  std::string bind_host = "127.0.0.1";
  std::string advertise_host = "127.0.0.1";
};

// Arguments of one enqueued operation (pointers owned by the caller).
struct EnqueueArgs {
  Request req;
  const void* input = nullptr;
  void* output = nullptr;  // null: the engine allocates the result
  size_t output_bytes = 0;  // checked against what the operation writes
};

class Runtime {
 public:
  explicit Runtime(RuntimeOptions opts);
  ~Runtime();

  const RuntimeOptions& options() const { return opts_; }
  const Config& config() const { return config_; }

  std::string local_endpoint();
  void connect(const std::vector<std::string>& endpoints);
  void start();

  // Validates and queues; returns a handle. Throws BadArgument for invalid
  // arguments, Shutdown when not running, the job's failure when it failed.
  int64_t enqueue(EnqueueArgs args);
  bool poll(int64_t handle) { return handles_.poll(handle); }
  bool wait(int64_t handle, double timeout_s = -1.0) { return handles_.wait(handle, timeout_s); }
  OpResult release(int64_t handle) { return handles_.release(handle); }

  // Ends the job on every rank (any rank may call it first). Blocks until the
  // background thread has stopped, at most about timeout_seconds.
  void shutdown();
  bool running() const;

 private:
  void validate(const Request& req) const;
  void validate_output(const EnqueueArgs& args) const;
  void loop();
  void coordinator_loop();
  void worker_loop();
  // Moves fresh queue entries into pending_; returns them.
  std::vector<Entry> take_fresh();
  RequestList request_list(std::vector<Entry>& unsent);
  void execute(const ResponseList& list);
  // Waits after an iteration without progress: on the queue when nothing is
  // in flight here (quiet), else with backoff.
  void idle_wait(Backoff& backoff, bool quiet);
  void stop(ErrorKind kind, const std::string& reason);

  RuntimeOptions opts_;
  Config config_;
  std::unique_ptr<MeshBuilder> data_builder_, control_builder_;
  std::unique_ptr<Mesh> data_, control_;
  TensorQueue queue_;
  HandleTable handles_;
  ResponseCache cache_;
  std::unique_ptr<Executor> executor_;
  std::unordered_map<std::string, Entry> pending_;  // background thread only

  std::thread thread_;
  std::atomic<bool> shutdown_requested_{false};
  mutable std::mutex state_mu_;
  std::condition_variable state_cv_;
  enum class State { Created, Running, Stopped } state_ = State::Created;
  ErrorKind stop_kind_ = ErrorKind::Shutdown;
  std::string stop_reason_;
};

}  // namespace ring
