// RingEngineApi (engine_api.h) over the published runtime: C arguments
// become EnqueueArgs, and each operation's handle gets an on_finish
// callback that releases it and hands the result to the caller's RingDone.
#include "frameworks/engine_api.h"

#include <cstring>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/types.h"
#include "engine/published.h"
#include "engine/runtime.h"
#include "frameworks/engine_calls.h"
#include "gpu/cuda_driver.h"

namespace ring {
namespace {

void copy_message(const std::string& what, char* error, size_t error_len) {
  if (!error || error_len == 0) return;
  const size_t n = std::min(what.size(), error_len - 1);
  std::memcpy(error, what.data(), n);
  error[n] = '\0';
}

// Runs fn(runtime) under the published runtime; returns RING_OK, or the
// kind of the RingError it threw (message copied into `error`).
template <class Fn>
int32_t guarded(Fn fn, char* error, size_t error_len) {
  try {
    with_published_runtime([&](Runtime* rt) {
      if (!rt) throw_error(ErrorKind::Shutdown, "ring is not initialized: call init() first");
      fn(*rt);
    });
    return RING_OK;
  } catch (const RingError& e) {
    copy_message(e.what(), error, error_len);
    return static_cast<int32_t>(e.kind());
  } catch (const std::exception& e) {
    copy_message(e.what(), error, error_len);
    return static_cast<int32_t>(ErrorKind::Internal);
  }
}

EnqueueArgs args_of(const RingOpArgs& a) {
  auto bad = [&](const std::string& what) {
    throw_error(ErrorKind::BadArgument, "tensor '" + std::string(a.name ? a.name : "") + "': " + what);
  };
  if (!a.name) bad("no name");
  if (a.op < 0 || a.op >= kNumOpTypes) bad("unknown operation");
  if (!is_valid_dtype(a.dtype)) bad("unsupported dtype code " + std::to_string(a.dtype));
  if (!is_valid_reduce_op(a.reduce_op)) bad("unknown reduce op");
  if (!is_valid_device(a.device_type, a.device_index)) bad("unknown device");
  if (a.ndim < 0 || a.nsplits < 0) bad("negative rank or split count");
  EnqueueArgs args;
  Request& q = args.req;
  q.name = a.name;
  q.op = static_cast<OpType>(a.op);
  q.dtype = static_cast<DataType>(a.dtype);
  q.reduce_op = static_cast<ReduceOp>(a.reduce_op);
  q.root = a.root;
  q.prescale = a.prescale;
  q.postscale = a.postscale;
  q.shape.assign(a.shape, a.shape + a.ndim);
  q.splits.assign(a.splits, a.splits + a.nsplits);
  q.device = Device{static_cast<DeviceType>(a.device_type), a.device_index};
  q.process_set = a.process_set;
  const size_t expected = static_cast<size_t>(q.num_elements()) * dtype_size(q.dtype);
  if (a.input_bytes != expected)
    bad("input has " + std::to_string(a.input_bytes) + " bytes; its shape and dtype need " + std::to_string(expected));
  args.input = a.input;
  args.output = a.output;
  args.output_bytes = a.output_bytes;
  args.stream = a.stream;
  return args;
}

void deliver(RingDone done, void* ctx, const OpResult& r) {
  RingResult out{};
  out.data = r.data ? r.data->data() : nullptr;
  out.nbytes = r.data ? r.data->size() : 0;
  out.device_data = r.device_data.get();
  out.device_bytes = r.device_bytes;
  out.shape = r.shape.data();
  out.ndim = static_cast<int32_t>(r.shape.size());
  out.received_splits = r.received_splits.data();
  out.nsplits = static_cast<int32_t>(r.received_splits.size());
  done(ctx, RING_OK, "", &out);
}

// enqueue() and enqueue_stream_ordered() (`at_enqueue`: EnqueueArgs::complete_at_enqueue).
int32_t enqueue_ops(const RingOpArgs* ops, int32_t n, RingDone done, void* const* ctxs, char* error, size_t error_len,
                    bool at_enqueue) {
  return guarded(
      [&](Runtime& rt) {
        std::vector<EnqueueArgs> group;
        group.reserve(n > 0 ? n : 0);
        for (int32_t i = 0; i < n; ++i) {
          group.push_back(args_of(ops[i]));
          group.back().complete_at_enqueue = at_enqueue;
        }
        std::vector<int64_t> handles = rt.enqueue_group(std::move(group));
        for (size_t i = 0; i < handles.size(); ++i) {
          void* ctx = ctxs[i];
          on_result(rt, handles[i], [done, ctx](const OpResult* r, const RingError* e) {
            if (e) done(ctx, static_cast<int32_t>(e->kind()), e->what(), nullptr);
            else deliver(done, ctx, *r);
          });
        }
      },
      error, error_len);
}

int32_t api_enqueue(const RingOpArgs* ops, int32_t n, RingDone done, void* const* ctxs, char* error,
                    size_t error_len) {
  return enqueue_ops(ops, n, done, ctxs, error, error_len, false);
}

int32_t api_enqueue_stream_ordered(const RingOpArgs* ops, int32_t n, RingDone done, void* const* ctxs, char* error,
                                   size_t error_len) {
  return enqueue_ops(ops, n, done, ctxs, error, error_len, true);
}

int32_t api_query(int32_t what, int32_t process_set, int64_t* value, char* error, size_t error_len) {
  return guarded([&](Runtime& rt) { *value = query(rt, what, process_set); }, error, error_len);
}

// Needs no runtime: a RingDone may call it while the runtime finishes.
int32_t api_copy_to_device(int32_t device, uint64_t stream, void* dst, const void* src, size_t bytes, char* error,
                           size_t error_len) {
  try {
    if (bytes == 0) return RING_OK;
    gpu::ScopedDevice current(device);  // BadArgument without the driver or that GPU
    gpu::cuda_check(gpu::cuda_driver().cuMemcpyAsync(reinterpret_cast<gpu::CUdeviceptr>(dst),
                                                     reinterpret_cast<gpu::CUdeviceptr>(src), bytes,
                                                     reinterpret_cast<gpu::CUstream>(stream)),
                    "cuMemcpyAsync (a result into the caller's memory)");
    return RING_OK;
  } catch (const RingError& e) {
    copy_message(e.what(), error, error_len);
    return static_cast<int32_t>(e.kind());
  }
}

std::atomic<int32_t (*)(int32_t)> g_signals_hook{nullptr};

int32_t api_signals(int32_t what) {
  int32_t (*hook)(int32_t) = g_signals_hook.load();
  return hook ? hook(what) : 0;
}

const RingEngineApi kApi = {RING_ENGINE_API_VERSION,     sizeof(RingEngineApi), &api_enqueue, &api_query,
                            &api_copy_to_device,         &api_enqueue_stream_ordered,
                            &api_signals};

}  // namespace

const RingEngineApi* engine_api() { return &kApi; }

void set_signals_hook(int32_t (*hook)(int32_t what)) { g_signals_hook.store(hook); }

void on_result(Runtime& rt, int64_t handle, std::function<void(const OpResult*, const RingError*)> fn) {
  Runtime* r = &rt;
  rt.on_finish(handle, [r, handle, fn = std::move(fn)] {
    OpResult res;
    try {
      res = r->release(handle);
    } catch (const RingError& e) {
      fn(nullptr, &e);
      return;
    }
    fn(&res, nullptr);
  });
}

int64_t query(Runtime& rt, int32_t what, int32_t process_set) {
  const RuntimeOptions& o = rt.options();
  switch (what) {
    case RING_QUERY_RANK: return o.rank;
    case RING_QUERY_SIZE: return o.size;
    case RING_QUERY_LOCAL_RANK: return o.local_rank;
    case RING_QUERY_LOCAL_SIZE: return o.local_size;
    case RING_QUERY_CROSS_RANK: return o.cross_rank;
    case RING_QUERY_CROSS_SIZE: return o.cross_size;
    case RING_QUERY_SET_SIZE:
    case RING_QUERY_SET_RANK: {
      auto set = rt.process_set(process_set);
      if (!set) throw_error(ErrorKind::BadArgument, "process set " + std::to_string(process_set) + " does not exist");
      return what == RING_QUERY_SET_SIZE ? set->size() : set->index_of(o.rank);
    }
    default:
      throw_error(ErrorKind::BadArgument, "unknown query " + std::to_string(what));
  }
}

}  // namespace ring
