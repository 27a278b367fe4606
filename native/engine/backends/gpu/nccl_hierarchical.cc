#include "engine/backends/gpu/nccl_hierarchical.h"

#include "collectives/collectives.h"
#include "collectives/slices.h"
#include "engine/backends/gpu/gpu_wait.h"
#include "engine/backends/gpu/nccl_call.h"
#include "gpu/device_streams.h"

namespace ring::gpu {
namespace {

void* at(CUdeviceptr base, size_t offset) { return reinterpret_cast<void*>(base + offset); }

// Blocks until the work queued so far on h.stream is done.
void wait_for_stream(const HostStage& h, const char* what) {
  std::shared_ptr<void> done = record_event(h.device, reinterpret_cast<uint64_t>(h.stream));
  wait_for_work(static_cast<CUevent>(done.get()), h.comm, h.timeout_seconds, what, h.cross);
}

}  // namespace

size_t hierarchical_elements(size_t count, int local_size) {
  const size_t l = static_cast<size_t>(local_size);
  return (count + l - 1) / l * l;
}

void hierarchical_allreduce(const HostStage& h, CUdeviceptr buf, size_t count, DataType dtype,
                            const HierarchicalReduction& red) {
  const CudaDriver& cu = cuda_driver();
  const NcclLibrary& nccl = nccl_library();
  const size_t esize = dtype_size(dtype);
  const size_t room = hierarchical_elements(count, h.size), shard = room / static_cast<size_t>(h.size);
  const ncclDataType_t dt = *nccl_type(dtype);
  if (room > count)  // the padding joins the reduction: zeros, not whatever the buffer held
    cuda_check(cu.cuMemsetD8Async(buf + count * esize, 0, (room - count) * esize, h.stream), "zeros of the padding");
  const CUdeviceptr mine = buf + static_cast<size_t>(h.rank) * shard * esize;
  {
    Reduction op(red.local, dtype, h.comm);
    nccl_check(nccl.ncclReduceScatter(at(buf, 0), at(mine, 0), shard, dt, op.op(), h.comm, h.stream),
               "ncclReduceScatter (inside the host)", h.comm);
  }
  if (h.cross->size() > 1) {
    const size_t bytes = shard * esize;
    if (bytes > h.staging->capacity())  // growing frees memory an earlier copy back may still read
      wait_for_stream(h, "hierarchical allreduce, waiting for the work before it");
    uint8_t* host = h.staging->at(h.device, bytes);
    cuda_check(cu.cuMemcpyAsync(reinterpret_cast<CUdeviceptr>(host), mine, bytes, h.stream),
               "copy of the host's shard to pinned memory");
    wait_for_stream(h, "hierarchical allreduce, NCCL stage inside the host");
    ring_allreduce(*h.cross, host, host, slice_counts(shard, h.cross->size()), dtype, red.cross, 1.0);
    cuda_check(cu.cuMemcpyAsync(mine, reinterpret_cast<CUdeviceptr>(host), bytes, h.stream),
               "copy of the hosts' shard back to the GPU");
  }
  nccl_check(nccl.ncclAllGather(at(mine, 0), at(buf, 0), shard, dt, h.comm, h.stream),
             "ncclAllGather (inside the host)", h.comm);
}

}  // namespace ring::gpu
