// The hierarchical allreduce on GPUs (RING_HIERARCHICAL_ALLREDUCE=1, global
// set): NCCL among the ranks of a host, the CPU ring across hosts, as the
// CPU backend's hierarchical allreduce does with shared memory inside a
// host (collectives/collectives.h).
//
// With L ranks on every host, the buffer is cut into L equal shards (the
// last padded; hierarchical_elements()), then:
//  1. ncclReduceScatter over the host's communicator: local rank l holds its
//     host's reduction of shard l, every scale factor applied
//     (HierarchicalReduction::local, nccl_reduction.h);
//  2. shard l goes to pinned host memory and the ranks with local rank l,
//     one per host (the cross mesh), allreduce it with the CPU ring,
//     unscaled (HierarchicalReduction::cross); with one host this step
//     does nothing;
//  3. it comes back, and ncclAllGather over the host's communicator gives
//     every rank of the host every shard.
// So each host sends 1/L of the data across hosts from each of its L ranks.
// Every rank ends with the same bits: each shard is finished by the CPU
// ring (identical on every host) and copied, not recomputed, inside a host.
//
// Step 2 waits on the calling thread for step 1 (gpu_wait.h: a failed
// communicator or RING_TIMEOUT_SECONDS without the work finishing throws
// RingError); step 3 is queued on the stream and not waited for.
#pragma once

#include <cstddef>

#include "common/types.h"
#include "engine/backends/gpu/nccl_reduction.h"
#include "gpu/device_memory.h"
#include "gpu/nccl.h"
#include "transport/mesh.h"

namespace ring::gpu {

// What the hierarchical allreduce runs on, for one engine stream.
struct HostStage {
  int device = 0;
  CUstream stream = nullptr;
  ncclComm_t comm = nullptr;  // of this host's ranks
  int size = 1, rank = 0;     // in `comm`
  Mesh* cross = nullptr;      // this local rank on every host
  PinnedBuffer* staging = nullptr;  // this stream's; only its work uses it
  double timeout_seconds = 30.0;
};

// Elements the buffer must have room for to allreduce `count` elements
// over `local_size` ranks of a host (count rounded up to a multiple).
size_t hierarchical_elements(size_t count, int local_size);

// Allreduces `count` elements of `dtype` in place in `buf` (device memory
// with room for hierarchical_elements()), queued on h.stream after what is
// already there. Throws RingError.
void hierarchical_allreduce(const HostStage& h, CUdeviceptr buf, size_t count, DataType dtype,
                            const HierarchicalReduction& red);

}  // namespace ring::gpu
