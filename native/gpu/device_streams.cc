#include "gpu/device_streams.h"

#include <atomic>
#include <map>
#include <mutex>
#include <vector>

#include "common/error.h"

namespace ring::gpu {
namespace {

struct DeviceState {
  CUstream stream = nullptr;
  std::vector<CUevent> free_events;
};

std::atomic<int> g_claimed{-1};
std::mutex g_mu;
std::map<int, DeviceState> g_devices;  // guarded by g_mu

}  // namespace

CUstream create_engine_stream() {
  const CudaDriver& cu = cuda_driver();
  int least = 0, greatest = 0;
  cuda_check(cu.cuCtxGetStreamPriorityRange(&least, &greatest), "cuCtxGetStreamPriorityRange");
  CUstream s = nullptr;
  cuda_check(cu.cuStreamCreateWithPriority(&s, CU_STREAM_NON_BLOCKING, greatest), "cuStreamCreateWithPriority");
  return s;
}

CUstream engine_stream(int device) {
  std::lock_guard<std::mutex> lock(g_mu);
  DeviceState& d = g_devices[device];
  if (!d.stream) d.stream = create_engine_stream();
  return d.stream;
}

std::shared_ptr<void> record_event(int device, uint64_t stream) {
  const CudaDriver& cu = cuda_driver();
  ScopedDevice current(device);
  CUevent event = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto& pool = g_devices[device].free_events;
    if (!pool.empty()) {
      event = pool.back();
      pool.pop_back();
    }
  }
  if (!event) cuda_check(cu.cuEventCreate(&event, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
  auto give_back = [device](void* e) {
    std::lock_guard<std::mutex> lock(g_mu);
    g_devices[device].free_events.push_back(static_cast<CUevent>(e));
  };
  std::shared_ptr<void> ready(event, give_back);
  cuda_check(cu.cuEventRecord(event, reinterpret_cast<CUstream>(stream)), "cuEventRecord");
  return ready;
}

void stream_wait_event(int device, uint64_t stream, const std::shared_ptr<void>& event) {
  ScopedDevice current(device);
  cuda_check(cuda_driver().cuStreamWaitEvent(reinterpret_cast<CUstream>(stream), static_cast<CUevent>(event.get()), 0),
             "cuStreamWaitEvent (a DLPack consumer's stream waits for the result)");
}

void claim_device(int device) {
  int expected = -1;
  if (g_claimed.compare_exchange_strong(expected, device) || expected == device) return;
  throw_error(ErrorKind::BadArgument, "a tensor on cuda:" + std::to_string(device) + ", but this process's tensors are on cuda:" +
                                          std::to_string(expected) +
                                          ": ring runs one GPU per process (torch.cuda.set_device(local_rank) first)");
}

int claimed_device() { return g_claimed.load(); }

int home_device(int local_rank) {
  const int claimed = claimed_device();
  if (claimed >= 0) return claimed;
  const int count = cuda_driver().device_count;
  return count > 0 && local_rank > 0 ? local_rank % count : 0;
}

}  // namespace ring::gpu
