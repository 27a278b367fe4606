// HostStagedBackend: collectives on tensors in GPU memory through host
// memory. Each input is copied (on the engine's stream of its GPU, after
// the event its caller's stream recorded at enqueue) into pinned host
// memory, the CPU ring runs the operation there (engine/backends/cpu_ring/cpu_ring.h,
// with its fusion layout, so results are bitwise those of the same data on
// the CPU), and each result the caller gave memory for is copied back into
// it. Results the engine allocates (allgather, alltoall) stay in host
// memory: the front end moves them to the device.
//
// Serves every CUDA device this process sees (gpu/cuda_driver.h). Used
// when NCCL is missing or RING_GPU_OPERATIONS=host; a backend ahead of it
// in the executor takes the responses it runs better.
//
// Completion: the copies back are waited for on the host before the
// handles complete, so a result is readable on any stream once its handle
// is done.
#pragma once

#include <cstddef>
#include <vector>

#include "engine/backend.h"
#include "engine/backends/cpu_ring/cpu_ring.h"
#include "gpu/cuda_driver.h"
#include "gpu/device_memory.h"

namespace ring::gpu {

class HostStagedBackend : public Backend {
 public:
  // `cpu` runs the operations and completes the handles; it must outlive
  // the backend. `local_rank`: this rank's on its host (home_device()).
  HostStagedBackend(CpuRingBackend* cpu, int local_rank) : cpu_(cpu), local_rank_(local_rank) {}

  const char* name() const override { return "host-staged GPU"; }
  bool serves(const Device& device) const override;
  void prepare(Entry& e, uint64_t stream) override;
  bool enabled(const Response& r) const override { return r.device.type == DeviceType::CUDA; }
  void execute(const Response& r, std::vector<Entry>& entries) override;

 private:
  // Bytes the operation writes into a caller-given output.
  static size_t output_bytes(const Entry& e, const OpResult& res);

  CpuRingBackend* cpu_;
  int local_rank_;
  PinnedBuffer staging_;  // every copy using it is waited for before execute() returns
};

}  // namespace ring::gpu
