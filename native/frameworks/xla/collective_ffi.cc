// ring's collectives as XLA FFI handlers for JAX (registered by
// ring_strategy/jax_ops.py with jax.ffi.register_ffi_target, called with
// jax.ffi.ffi_call inside jit). Compiled into the extension when jaxlib's
// FFI headers were found at build time (RING_HAS_XLA_FFI).
//
// Each handler is asynchronous: it queues its buffers into the published
// runtime and returns an ffi::Future that the engine's completion callbacks
// fulfil, so no XLA thread waits and the collectives of one program may run
// in any order (the engine negotiates them by name). CPU only for now.
//
// XLA may wait for one asynchronous call before it starts the next, in an
// order its scheduler chose, and the programs of two ranks may differ (a
// rank's constants), so jax_ops chains the collectives of one trace by a
// data dependency: each takes the previous one's output as an extra,
// unread argument. The ranks then submit them in program order.
//
// Attributes: op (OpType), names ('\n'-separated, one per argument),
// reduce_op, prescale, postscale (f64), root, process_set. Arguments and
// results pair up in order; allreduce and broadcast write their results in
// place of the result buffers, allgather copies the engine's result in
// (its size must match the result buffer the caller declared).
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/types.h"
#include "engine/published.h"
#include "engine/runtime.h"
#include "frameworks/engine_calls.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace ring {
namespace {

bool ring_dtype(ffi::DataType t, DataType* out) {
  switch (t) {
    case ffi::DataType::U8: *out = DataType::UInt8; return true;
    case ffi::DataType::S8: *out = DataType::Int8; return true;
    case ffi::DataType::S16: *out = DataType::Int16; return true;
    case ffi::DataType::S32: *out = DataType::Int32; return true;
    case ffi::DataType::S64: *out = DataType::Int64; return true;
    case ffi::DataType::F16: *out = DataType::Float16; return true;
    case ffi::DataType::BF16: *out = DataType::BFloat16; return true;
    case ffi::DataType::F32: *out = DataType::Float32; return true;
    case ffi::DataType::F64: *out = DataType::Float64; return true;
    case ffi::DataType::PRED: *out = DataType::Bool; return true;
    default: return false;
  }
}

// The ring error class a message starts with, as the TensorFlow kernels do.
ffi::Error ring_error(ErrorKind kind, const std::string& message) {
  static const char* const kClass[] = {"RingError",        "BadArgumentError", "MismatchError",
                                       "PeerFailureError", "RingTimeoutError", "ShutdownError"};
  const int k = static_cast<int>(kind);
  const std::string text = std::string(kClass[is_valid_error_kind(k) ? k : 0]) + ": " + message;
  return ffi::Error(kind == ErrorKind::BadArgument ? ffi::ErrorCode::kInvalidArgument : ffi::ErrorCode::kInternal,
                    text);
}

ffi::Future failed(const ffi::Error& e) {
  ffi::Promise p;
  p.SetError(e);
  return ffi::Future(p);
}

std::vector<std::string> split_names(std::string_view names) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= names.size()) {
    const size_t end = std::min(names.find('\n', start), names.size());
    out.emplace_back(names.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

struct Call {
  int64_t op, reduce_op, root, process_set;
  double prescale, postscale;
};

// The EnqueueArgs of argument i into result i.
EnqueueArgs member(const Call& c, const std::string& name, const ffi::AnyBuffer& in, ffi::AnyBuffer& out) {
  EnqueueArgs a;
  Request& q = a.req;
  q.name = name;
  q.op = static_cast<OpType>(c.op);
  if (!ring_dtype(in.element_type(), &q.dtype))
    throw_error(ErrorKind::BadArgument, "tensor '" + name + "': ring does not support this dtype");
  q.reduce_op = static_cast<ReduceOp>(c.reduce_op);
  q.root = static_cast<int32_t>(c.root);
  q.prescale = c.prescale;
  q.postscale = c.postscale;
  for (int64_t d : in.dimensions()) q.shape.push_back(d);
  q.process_set = static_cast<int32_t>(c.process_set);
  a.input = in.untyped_data();
  if (q.op == OpType::Allreduce || q.op == OpType::Broadcast) {
    a.output = out.untyped_data();
    a.output_bytes = out.size_bytes();
  }
  return a;
}

ffi::Future collective(ffi::RemainingArgs args, ffi::RemainingRets rets, int64_t op, std::string_view names,
                       int64_t reduce_op, double prescale, double postscale, int64_t root, int64_t process_set) {
  const Call c{op, reduce_op, root, process_set, prescale, postscale};
  const std::vector<std::string> each = split_names(names);
  // Arguments past the named ones only order this call after another
  // (jax_ops passes the previous collective's output of the same trace).
  const size_t n = each.size();
  if (args.size() < n || rets.size() != n)
    return failed(ring_error(ErrorKind::BadArgument, "ring's FFI call needs one result and one name per argument"));
  if (op != static_cast<int64_t>(OpType::Allreduce) && op != static_cast<int64_t>(OpType::Broadcast) &&
      op != static_cast<int64_t>(OpType::Allgather))
    return failed(ring_error(ErrorKind::BadArgument, "ring's FFI handler runs allreduce, broadcast and allgather"));
  std::vector<EnqueueArgs> group;
  std::vector<std::pair<void*, size_t>> outs;  // where an engine-allocated result is copied
  try {
    for (size_t i = 0; i < n; ++i) {
      auto in = args.get<ffi::AnyBuffer>(i);
      auto out = rets.get<ffi::AnyBuffer>(i);
      if (!in.has_value() || !out.has_value())
        throw_error(ErrorKind::BadArgument, "ring's FFI call takes and gives arrays");
      group.push_back(member(c, each[i], *in, **out));
      outs.emplace_back((*out)->untyped_data(), (*out)->size_bytes());
    }
  } catch (const RingError& e) {
    return failed(ring_error(e.kind(), e.what()));
  }
  ffi::Promise promise;
  ffi::Future future(promise);
  ffi::CountDownPromise left(promise, static_cast<int64_t>(n));
  try {
    with_published_runtime([&](Runtime* rt) {
      if (!rt) throw_error(ErrorKind::Shutdown, "ring is not initialized: call init() first");
      std::vector<int64_t> handles = rt->enqueue_group(std::move(group));
      for (size_t i = 0; i < handles.size(); ++i) {
        on_result(*rt, handles[i], [left, dst = outs[i]](const OpResult* r, const RingError* e) mutable {
          if (e) {
            left.CountDown(ring_error(e->kind(), e->what()));
          } else if (r->data && r->data->size() != dst.second) {
            left.CountDown(ring_error(ErrorKind::BadArgument,
                                      "the result has " + std::to_string(r->data->size()) + " bytes; the call "
                                      "declared " + std::to_string(dst.second) + " (allgather of unequal rows?)"));
          } else {
            if (r->data && !r->data->empty()) std::memcpy(dst.first, r->data->data(), dst.second);
            left.CountDown();
          }
        });
      }
    });
  } catch (const RingError& e) {
    return failed(ring_error(e.kind(), e.what()));
  }
  return future;
}

}  // namespace
}  // namespace ring

XLA_FFI_DEFINE_HANDLER_SYMBOL(RingCollectiveCpu, ring::collective,
                              ffi::Ffi::Bind()
                                  .RemainingArgs()
                                  .RemainingRets()
                                  .Attr<int64_t>("op")
                                  .Attr<std::string_view>("names")
                                  .Attr<int64_t>("reduce_op")
                                  .Attr<double>("prescale")
                                  .Attr<double>("postscale")
                                  .Attr<int64_t>("root")
                                  .Attr<int64_t>("process_set"));
