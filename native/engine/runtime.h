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
// Progress: rank 0 runs the coordinator's step (coordinator_loop.cc), other
// ranks the worker's step (worker_loop.cc), one at a time under progress_mu_
// (runtime_progress.cc). The background
// thread steps whenever nobody else does; a caller blocked in wait() steps
// itself while its operation is unfinished, so a synchronous operation
// needs no hand-off between threads on its critical path. Control messages
// travel on their own mesh so a request never interleaves with collective
// data on a byte stream.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/autotune.h"
#include "engine/config.h"
#include "engine/coordinator.h"
#include "engine/executor.h"
#include "engine/fast_path.h"
#include "engine/handle_table.h"
#include "engine/heartbeats.h"
#include "engine/process_sets.h"
#include "engine/response_cache.h"
#include "engine/stall_inspector.h"
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
  // Tensors in GPU memory: the stream (a CUstream) the caller's framework
  // produced the input on; 0: the legacy default stream.
  uint64_t stream = 0;
  // Tensors in GPU memory run on NCCL: complete as soon as the engine has
  // queued the work and made `stream` wait for it, as
  // RING_ENABLE_ASYNC_COMPLETION=1 makes every such operation complete
  // (backends/gpu/nccl_backend.h), for this operation alone. For callers
  // whose consumers are ordered by `stream`, not by the handle (XLA's FFI
  // handlers: frameworks/xla/collective_call.h).
  bool complete_at_enqueue = false;
  // false: the caller waits for it right away and makes the progress
  // itself, so the background thread is not woken (saves a thread hand-off).
  bool wake = true;
};

class Runtime {
 public:
  explicit Runtime(RuntimeOptions opts);
  ~Runtime();

  const RuntimeOptions& options() const { return opts_; }
  const Config& config() const { return config_; }

  // This rank's endpoint for the rendezvous: its data and control
  // listeners, its CPU affinity and its host; connect() takes every rank's.
  std::string local_endpoint();
  void connect(const std::vector<std::string>& endpoints);
  void start();
  // The CPUs this rank may count on (cpus_of_rank over its host's ranks),
  // known from connect() on.
  double cpus_per_rank() const { return cpus_per_rank_; }

  // Validates and queues; returns a handle. Throws BadArgument for invalid
  // arguments (a device no backend serves among them), Shutdown when not
  // running, the job's failure when it failed.
  int64_t enqueue(EnqueueArgs args) { return enqueue_group({std::move(args)})[0]; }
  // Queues several operations at once, in order, as enqueue() queues one;
  // returns their handles. Every member is validated (and its name taken)
  // before any is queued: a bad member throws enqueue()'s error, naming its
  // tensor, and nothing is queued. The background thread is woken once,
  // when any member asks for it (EnqueueArgs::wake).
  std::vector<int64_t> enqueue_group(std::vector<EnqueueArgs> group);
  bool poll(int64_t handle) { return handles_.poll(handle); }
  // Calls `fn` once `handle` has finished (HandleTable::on_finish): at once
  // when it has, else on the thread that finishes it, holding no lock of
  // the table or of the runtime's state (it may release the handle and
  // enqueue again), but possibly the progress lock: `fn` must not wait().
  void on_finish(int64_t handle, std::function<void()> fn) { handles_.on_finish(handle, std::move(fn)); }
  // The process set `id` (null when none), for queries of its ranks.
  std::shared_ptr<const ProcessSet> process_set(int32_t id) const { return sets_.find(id); }
  // Blocks until the operation finished (true) or timeout_s passed (false;
  // < 0: no limit). Makes progress itself while it can (drive(), which may
  // run past timeout_s while progress keeps coming).
  bool wait(int64_t handle, double timeout_s = -1.0);
  // wait() for every handle of `handles`: true once all have finished,
  // false when timeout_s (for all of them together; < 0: no limit) passed.
  bool wait_all(const std::vector<int64_t>& handles, double timeout_s = -1.0);
  // Returns the result (or throws the error) and forgets the handle. The
  // tensor's name was freed when the operation finished.
  OpResult release(int64_t handle);
  // release() of every handle (all finished): the results in order, or,
  // once every handle is forgotten, the first failed one's error.
  std::vector<OpResult> release_all(const std::vector<int64_t>& handles) { return handles_.release_all(handles); }

  // Process sets (engine/process_sets.h), while running. The front end adds
  // and removes a set on every rank, and has the ranks agree on it, before
  // any rank uses it. add: BadArgument for an id in use or bad ranks.
  // remove: BadArgument for id 0, or while this rank has operations of the
  // set in flight; false when no such set.
  void add_process_set(int32_t id, const std::vector<int>& ranks);
  bool remove_process_set(int32_t id);
  // Blocks until this rank has no unfinished operation of set `id`, from
  // any front end or framework kernel (true), or timeout_s passed (false).
  // The operations progress meanwhile on the background thread.
  bool wait_set_idle(int32_t id, double timeout_s) {
    return handles_.wait_no_name_prefix(qualified_name("", id), timeout_s);
  }

  // The timeline (engine/timeline.h) is written by rank 0; on other ranks
  // these do nothing. start_timeline replaces a timeline being written.
  void start_timeline(const std::string& path, bool mark_cycles);
  void stop_timeline();

  // Ends the job on every rank (any rank may call it first). Blocks until the
  // background thread has stopped, at most about timeout_seconds.
  void shutdown();
  bool running() const;

 private:
  // The set `req` runs on, after checking that it exists and has this rank.
  std::shared_ptr<const ProcessSet> process_set_of(const Request& req) const;
  void validate(const Request& req, const ProcessSet& set) const;
  // op=Adasum: allreduce of a floating dtype on a power-of-two set.
  void validate_adasum(const Request& req, const ProcessSet& set) const;
  void validate_output(const EnqueueArgs& args, const ProcessSet& set) const;
  // The queue entry for `args` once validated (every check that needs no
  // lock), its name qualified by its process set; the backend prepares it later.
  Entry checked_entry(EnqueueArgs args) const;
  // Backend::prepare of the backend serving `e`'s device; BadArgument
  // naming the tensor when none does. Caller holds state_mu_.
  void prepare_locked(Entry& e);
  // The longest control message accepted from a peer.
  static constexpr size_t kMaxControlMessage = 64u << 20;
  // A rank with nothing moving checks that its peers are alive this often.
  static constexpr double kIdleLivenessSeconds = 0.1;
  // State of the progress loop; guarded by progress_mu_.
  struct LoopState {
    // Worker: requests not sent yet, RequestLists sent / acknowledged.
    std::vector<Request> unsent;
    int64_t sent = 0, acked = 0;
    bool shutdown_sent = false;
    // Coordinator: per-worker RequestLists received / acknowledged.
    std::unique_ptr<Coordinator> coord;
    std::vector<int64_t> received, acked_by;
    bool shutdown_noted = false;
    bool batching = false;
    std::chrono::steady_clock::time_point now{};  // when the current step() began
    std::chrono::steady_clock::time_point first_ready{};
    std::chrono::steady_clock::time_point last_check{};
    std::unique_ptr<StallInspector> stalls;
    std::unique_ptr<Autotuner> tuner;  // RING_AUTOTUNE
    double cycle_time_ms = 0.0;
    bool finished = false;  // the job ended; the meshes are closed next
    std::unique_ptr<Heartbeats> heartbeats;  // on the control mesh, to TCP peers
  };
  void loop();
  // One iteration of progress (caller holds progress_mu_); true when it
  // moved something. Errors end the job: stop() and loop_.finished.
  bool step();
  bool coordinator_step();
  // True when a step that moved nothing should check its peers' liveness
  // (kIdleLivenessSeconds since the last check, as of loop_.now), and the
  // count starts again.
  bool liveness_due(bool progress);
  // Creates the coordinator and what drives it (first coordinator_step).
  void start_coordinator();
  // Rank 0's own new entries and shutdown, and the workers' RequestLists,
  // into `coord`; true when something arrived. A worker's failure note ends
  // the job (loop_.finished).
  bool gather_requests(Coordinator& coord);
  // Sends and executes a ResponseList when a batch is due or a worker waits
  // for its acknowledgement; true when it did. A shutdown list ends the job.
  bool emit_responses(Coordinator& coord);
  // Feeds the autotuner what `list` schedules and applies its new settings.
  void autotune(Coordinator& coord, const ResponseList& list);
  bool worker_step();
  // True when this rank has nothing in flight (caller holds progress_mu_).
  bool quiet() const { return pending_.empty() && loop_.unsent.empty(); }
  // The caller's side of wait(): steps while `handle` is unfinished and
  // progress comes quickly; returns when it is done or when waiting longer
  // is better left to the background thread.
  void drive(int64_t handle);
  // The background thread's wait for news (a peer's control message, a
  // queued entry, a notify()): on the control mesh's doorbell once blocking
  // is due, when it has one; with `backoff` otherwise. Called without
  // progress_mu_.
  void idle_wait(Backoff& backoff);
  // Ends the job on this rank. A failure (not a shutdown) is first matched
  // against a peer's note of an earlier failure (its root cause wins), gets
  // this rank's unfinished tensors named, and is passed on to the peers
  // that can still hear it, unless it came from one (`from_peer`).
  void end(ErrorKind kind, const std::string& reason, bool from_peer = false, bool quiet = false);
  // A failure note waiting on the control mesh from a peer, if any; on a
  // worker, rank 0's orderly shutdown list instead goes to `orderly`.
  bool peer_note(ErrorKind* kind, std::string* reason, std::optional<ResponseList>* orderly);
  void tell_peers(ErrorKind kind, const std::string& reason);
  std::string unfinished_names();
  // Ends the job as a shutdown ResponseList says (the end of the job for
  // every rank; to ranks other than the one that left, a lost peer).
  void end_by_list(const ResponseList& list);
  std::string cached_name(const ResponseList& list, uint32_t id) const;
  // Moves fresh queue entries into pending_, in order, after handing the
  // request of each one the fast path does not take to `each`.
  void take_fresh(const std::function<void(const Request&)>& each);
  // The fast path's step (engine/fast_path.h): the requests it gives back
  // go to `to_negotiation`, in order. True when something moved.
  bool fast_step(const std::function<void(const Request&)>& to_negotiation);
  RequestList request_list(std::vector<Request>& unsent);
  void execute(const ResponseList& list);
  // Fails every unfinished operation; logs an error unless `quiet` (or a
  // plain shutdown). The handles' callbacks run after state_mu_ is released.
  void stop(ErrorKind kind, const std::string& reason, bool quiet = false);
  void stop_locked(ErrorKind kind, const std::string& reason, bool quiet);

  RuntimeOptions opts_;
  Config config_;
  std::unique_ptr<MeshBuilder> data_builder_, control_builder_;
  std::unique_ptr<Mesh> data_, control_;
  TensorQueue queue_;
  HandleTable handles_;
  ResponseCache cache_;
  ProcessSetTable sets_;
  std::unique_ptr<Executor> executor_;
  Timeline timeline_;
  std::mutex progress_mu_;  // one thread steps at a time
  // A caller that queued with wake = false drives its operation (claimed
  // after each of its steps):
  // until this steady-clock time (ns; 0: none) the background thread leaves
  // the stepping to it and sleeps instead of competing for progress_mu_.
  // A claim expires by itself, so a caller that never waits stalls nothing.
  std::atomic<int64_t> drive_claim_ns_{0};
  void claim_drive();
  // Drops the claim: the caller no longer drives (its operation finished,
  // or it hands back to the background thread).
  void release_drive() { drive_claim_ns_.store(0, std::memory_order_relaxed); }
  bool drive_claimed() const;
  LoopState loop_;
  std::unordered_map<std::string, Entry> pending_;  // guarded by progress_mu_
  // Agreed cached allreduces skip rank 0 (engine/fast_path.h); driven
  // under progress_mu_ like pending_, whose entries it holds.
  std::unique_ptr<FastPath> fast_;

  std::thread thread_;
  std::atomic<bool> shutdown_requested_{false};
  mutable std::mutex state_mu_;
  std::condition_variable state_cv_;
  double cpus_per_rank_ = 1.0;
  bool even_hosts_ = true;  // connect(): BackendLayout::even_hosts
  enum class State { Created, Running, Stopped } state_ = State::Created;
  ErrorKind stop_kind_ = ErrorKind::Shutdown;
  std::string stop_reason_;
};

}  // namespace ring
