#include "gpu/finalizer.h"

#include <chrono>

namespace ring::gpu {

Finalizer::Finalizer(HandleTable* handles) : handles_(handles), thread_([this] { loop(); }) {}

Finalizer::~Finalizer() {
  drain();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Finalizer::add(GpuWork work) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(work));
  }
  cv_.notify_all();
}

void Finalizer::abort() {
  aborted_.store(true);
  cv_.notify_all();
}

void Finalizer::drain() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return queue_.empty() && busy_ == 0; });
}

std::string Finalizer::wait(const GpuWork& w) {
  const CudaDriver& cu = cuda_driver();
  const NcclLibrary& nccl = nccl_library();
  ScopedDevice current(w.device);
  CUevent event = static_cast<CUevent>(w.done.get());
  while (true) {
    if (aborted_.load()) return "the job failed while this GPU operation was in flight";
    const CUresult rc = cu.cuEventQuery(event);
    if (rc == CUDA_SUCCESS) return "";
    if (rc != CUDA_ERROR_NOT_READY) return "GPU operation failed: CUDA " + cuda_error_text(cu, rc);
    ncclResult_t async = ncclSuccess;
    if (w.comm && nccl.ncclCommGetAsyncError(w.comm, &async) == ncclSuccess && async != ncclSuccess &&
        async != ncclInProgress)
      return std::string("NCCL operation failed: ") + nccl.ncclGetErrorString(async);
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

void Finalizer::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_ and nothing left
    GpuWork w = std::move(queue_.front());
    queue_.pop_front();
    ++busy_;
    lock.unlock();
    std::string failure;
    try {
      failure = wait(w);
    } catch (const RingError& e) {
      failure = e.what();
    }
    for (size_t i = 0; i < w.handles.size(); ++i) {
      if (w.handles[i] == 0) continue;
      if (failure.empty())
        handles_->complete(w.handles[i], std::move(w.results[i]));
      else
        handles_->fail(w.handles[i], ErrorKind::Internal, failure);
    }
    w = GpuWork{};  // frees what the work kept, outside the lock
    lock.lock();
    --busy_;
    cv_.notify_all();
  }
}

}  // namespace ring::gpu
