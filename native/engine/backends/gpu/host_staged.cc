#include "engine/backends/gpu/host_staged.h"

#include <algorithm>

#include "common/types.h"
#include "gpu/device_streams.h"

namespace ring::gpu {
namespace {

constexpr size_t kAlign = 64;

size_t aligned(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

size_t input_bytes(const Entry& e) { return static_cast<size_t>(e.req.num_elements()) * dtype_size(e.req.dtype); }

CUdeviceptr ptr(const void* p) { return reinterpret_cast<CUdeviceptr>(p); }

// Waits on the host for the engine's stream of every device in `devices`.
void synchronize(const std::vector<int>& devices, const char* what) {
  for (int d : devices) {
    ScopedDevice current(d);
    cuda_check(cuda_driver().cuStreamSynchronize(engine_stream(d)), what);
  }
}

// The device whose context allocates the staging memory: the first
// entry's, or this rank's own for a joined rank's stand-ins alone.
int staging_device(const std::vector<Entry>& entries, int local_rank) {
  for (const Entry& e : entries)
    if (e.handle != 0) return e.req.device.index;
  return home_device(local_rank);
}

}  // namespace

bool HostStagedBackend::serves(const Device& device) const {
  return device.type == DeviceType::CUDA && cuda_refusal(device.index).empty();
}

void HostStagedBackend::prepare(Entry& e, uint64_t stream) {
  claim_device(e.req.device.index);
  e.ready = record_event(e.req.device.index, stream);
}

size_t HostStagedBackend::output_bytes(const Entry& e, const OpResult& res) {
  if (e.req.op != OpType::Reducescatter) return input_bytes(e);
  size_t n = dtype_size(e.req.dtype);
  for (int64_t d : res.shape) n *= static_cast<size_t>(d);
  return n;
}

void HostStagedBackend::execute(const Response& r, std::vector<Entry>& entries) {
  const CudaDriver& cu = cuda_driver();
  // Stage in: every input after its producer, on its own GPU's engine
  // stream, into one region per entry that also receives the entry's
  // result (the CPU ring works in place).
  size_t total = 0;
  for (const Entry& e : entries) total += aligned(input_bytes(e));
  uint8_t* host = staging_.at(staging_device(entries, local_rank_), total);
  std::vector<Entry> staged(entries.size());
  std::vector<int> devices;
  size_t offset = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    Entry& s = staged[i];
    s.req = e.req;
    s.handle = e.handle;
    if (e.handle == 0) continue;  // a joined rank's stand-in: the CPU ring supplies zeros
    const int device = e.req.device.index;
    if (std::find(devices.begin(), devices.end(), device) == devices.end()) devices.push_back(device);
    uint8_t* region = host + offset;
    offset += aligned(input_bytes(e));
    ScopedDevice current(device);
    CUstream stream = engine_stream(device);
    if (e.ready) cuda_check(cu.cuStreamWaitEvent(stream, static_cast<CUevent>(e.ready.get()), 0), "cuStreamWaitEvent");
    if (input_bytes(e))
      cuda_check(cu.cuMemcpyAsync(ptr(region), ptr(e.input), input_bytes(e), stream), "copy of an input to the host");
    s.input = region;
    s.output = e.output ? region : nullptr;
  }
  synchronize(devices, "cuStreamSynchronize (inputs staged)");
  std::vector<OpResult> results = cpu_->run(r, staged);
  // Stage out into the caller's outputs; engine-allocated results stay on the host.
  for (size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    if (e.handle == 0 || !e.output || results[i].data) continue;
    const size_t n = output_bytes(e, results[i]);
    if (!n) continue;
    ScopedDevice current(e.req.device.index);
    cuda_check(cu.cuMemcpyAsync(ptr(e.output), ptr(staged[i].output), n, engine_stream(e.req.device.index)),
               "copy of a result to the GPU");
  }
  synchronize(devices, "cuStreamSynchronize (results copied back)");
  cpu_->finish(staged, results);  // the staged entries carry the handles
}

}  // namespace ring::gpu
