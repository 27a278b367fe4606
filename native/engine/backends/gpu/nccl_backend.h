// NcclBackend: collectives on GPU tensors with NCCL, on the engine's own
// streams, completing asynchronously.
//
// Per GPU the backend has RING_NUM_NCCL_STREAMS lanes (a non-blocking
// stream of the greatest priority (create_engine_stream()), its fusion buffer and, per process set, its communicator:
// nccl_comms.h); responses take the lanes in turn. For a response the lane's
// stream first waits for every entry's ready event (recorded on the
// caller's stream at enqueue), then runs the copies and NCCL calls; an event
// recorded after them goes to the finalizer (finalizer.h), which completes
// the handles once it fires. No host-side wait on the engine's thread, and
// no device-wide synchronisation.
//
// RING_ENABLE_ASYNC_COMPLETION=1: the handles complete as soon as the work
// is queued, each caller's stream (Entry::stream) made to wait for the
// work's event first, so work the caller queues there next sees the
// results; the finalizer still watches the work for errors. An entry with
// complete_at_enqueue completes so whatever the setting. An input may
// then be freed while the work still reads it: safe when its memory is
// reused only for work on that stream (torch's and cupy's pools).
//
// Allreduce fuses its entries into the lane's fusion buffer (copies in and
// out batched into few kernel launches: batched_copy.h; one entry reduces
// straight from input to output); scale
// factors fold into the reduction (nccl_reduction.h). Allgather is NCCL's
// own when every rank sends as many rows, else one broadcast per rank in a group, alltoall a
// group of sends and receives, reducescatter NCCL's own when the rows split
// evenly and a group of reduces otherwise; results the engine allocates
// stay on the GPU (OpResult::device_data).
//
// RING_HIERARCHICAL_ALLREDUCE=1 runs the global set's allreduces with NCCL
// inside a host and the CPU ring across hosts (nccl_hierarchical.h); "auto"
// leaves them to NCCL alone, which finds its own way across hosts.
//
// What NCCL does not run (Adasum, int16 or bool reductions, scaled integer
// reductions), and every GPU operation of a process set where some rank
// has no NCCL, runs host-staged (host_staged.h); every rank decides alike.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "engine/backend.h"
#include "engine/backends/cpu_ring/cpu_ring.h"
#include "engine/backends/gpu/finalizer.h"
#include "engine/backends/gpu/host_staged.h"
#include "engine/backends/gpu/nccl_comms.h"
#include "engine/backends/gpu/nccl_hierarchical.h"
#include "engine/backends/gpu/nccl_reduction.h"
#include "engine/config.h"
#include "engine/handle_table.h"
#include "engine/op_timeline.h"
#include "gpu/device_memory.h"

namespace ring::gpu {

class NcclBackend : public Backend {
 public:
  // `cpu` (for process sets' meshes), `host` (what NCCL does not run) and
  // `handles` must outlive the backend. `local_rank`: this rank's on its
  // host, whose GPU a rank with no CUDA tensor yet joins communicators on
  // (home_device()).
  NcclBackend(CpuRingBackend* cpu, HostStagedBackend* host, HandleTable* handles, const Config& config,
              int local_rank)
      : cpu_(cpu), host_(host), handles_(handles), local_rank_(local_rank), host_only_(config.gpu_host_staged),
        hierarchical_(config.hierarchical_allreduce == 1), async_completion_(config.async_completion),
        streams_(config.nccl_streams), timeout_seconds_(config.timeout_seconds), comms_(config.timeout_seconds),
        finalizer_(handles) {
    set_nccl_wait_limit(config.timeout_seconds);
  }

  const char* name() const override { return "nccl"; }
  bool serves(const Device& device) const override { return host_->serves(device); }
  void prepare(Entry& e, uint64_t stream) override { host_->prepare(e, stream); }
  bool enabled(const Response& r) const override { return r.device.type == DeviceType::CUDA && !host_only_; }
  void execute(const Response& r, std::vector<Entry>& entries) override;
  // The finalizer stops asking the communicators first: abort_all() frees them.
  void abort() override {
    finalizer_.abort();
    comms_.abort_all();
  }
  void check() override;
  void settle(double timeout_seconds) override { finalizer_.drain_for(timeout_seconds); }
  void forget_set(uint64_t serial) override { comms_.retire(static_cast<int64_t>(serial)); }
  // Execution phases go to `timeline` (null: none): the operation from the
  // moment its work is queued until the finalizer sees it done, as
  // NCCL_<OP> (NCCL_HIERARCHICAL_ALLREDUCE).
  void set_timeline(Timeline* timeline) { timeline_.set_timeline(timeline); }

 private:
  struct Lane {
    Lane(int device, CUstream s) : stream(s), fusion(device) {}
    CUstream stream;
    DeviceBuffer fusion;
    PinnedBuffer staging;  // the hierarchical allreduce's
  };
  // What one response's calls run on.
  struct Call {
    int device = 0;
    Lane* lane = nullptr;
    ncclComm_t comm = nullptr;
    int n = 1, me = 0;
    std::optional<HostStage> stage;  // a hierarchical allreduce (comm is then the host's)
    std::vector<std::shared_ptr<void>>* keep = nullptr;  // freed once the response's work is done
  };
  // The group (nccl_comms.h) of the hierarchical allreduce's host stage.
  static constexpr int64_t kHostGroup = -1;

  Lane& lane(int device, int index);
  void run(const Call& c, const Response& r, std::vector<Entry>& entries, std::vector<OpResult>& results);
  // c.stage, when the response's allreduce runs hierarchically, and c.comm.
  void choose_comm(const Response& r, Mesh& mesh, int64_t group, int lane_index, Call& c);
  // Completes now the handles of w that complete at enqueue (every one
  // under RING_ENABLE_ASYNC_COMPLETION, else those with
  // Entry::complete_at_enqueue), each caller's stream waiting for w.done
  // first; w keeps watching for errors and finishes the others.
  void complete_now(const std::vector<Entry>& entries, GpuWork& w);
  void allreduce(const Call& c, std::vector<Entry>& entries, std::vector<OpResult>& results);
  void allgather(const Call& c, Entry& e, const std::vector<int64_t>& first_dims, OpResult& res);
  void broadcast(const Call& c, Entry& e, OpResult& res);
  void alltoall(const Call& c, Entry& e, const std::vector<int64_t>& splits, OpResult& res);
  void reducescatter(const Call& c, Entry& e, OpResult& res);
  // e's output, or GPU memory of `bytes` from the pool (device_pool.h),
  // handed over in `res`, reusable after e's stream is done with it.
  static CUdeviceptr output_for(const Call& c, Entry& e, size_t bytes, OpResult& res);

  CpuRingBackend* cpu_;
  HostStagedBackend* host_;
  HandleTable* handles_;
  int local_rank_;
  bool host_only_;
  bool hierarchical_;
  bool async_completion_;
  int streams_;
  double timeout_seconds_;
  // Per process set (ProcessSet::serial), the lane its next response takes:
  // every rank of a set runs the set's responses in the same order, so its
  // ranks agree on the lane (and so on the communicator) whatever other
  // sets they are in.
  std::map<uint64_t, int> next_lane_;
  std::map<std::pair<int, int>, std::unique_ptr<Lane>> lanes_;  // (device, index)
  NcclCommunicators comms_;
  OpTimeline timeline_;
  Finalizer finalizer_;  // last: destroyed first, after the work in flight is done
};

}  // namespace ring::gpu
