// ring's collectives as XLA FFI handlers of one target, "ring_collective"
// (collective_ffi.h), one per platform: JAX calls it with jax.ffi.ffi_call
// inside jit (ring_strategy/jax_ops.py), TensorFlow's jit_compile programs
// through the RingXlaCollective op's lowering
// (frameworks/tensorflow/xla_kernels.cc). Both are thin adapters from XLA's
// types to collective_call.h, which holds the logic.
//
// The CPU handler (host memory) is asynchronous: it queues its buffers into
// the engine through RingEngineApi (ring_xla_engine_api()) and returns an
// ffi::Future that the engine's completion callbacks fulfil, so no XLA
// thread waits and the collectives of one program may run in any order
// (the engine negotiates them by name).
//
// The CUDA handler (GPU memory) hands the engine XLA's stream and device
// ordinal: xla_call::run_on_stream says what it waits for (the engine's
// enqueue of its NCCL work, XLA's stream then waiting on the work's event;
// never the work itself). Barrier and join are refused there. It is not declared command-buffer compatible, so
// XLA calls it at run time and never captures it into a CUDA graph (the
// engine records and waits on events on that stream at each call).
//
// XLA may wait for one asynchronous call before it starts the next, in an
// order its scheduler chose, and the programs of two ranks may differ (a
// rank's constants), so the callers chain the collectives of one trace by a
// data dependency: each takes the previous one's output as an extra,
// unread argument. The ranks then submit them in program order.
//
// Attributes: op (OpType), names ('\n'-separated, one per argument),
// reduce_op, prescale, postscale (f64), root, process_set. Arguments and
// results pair up in order. Allreduce, broadcast and reducescatter write
// their results in place of the result buffers (a reducescatter's holds this
// rank's rows, ring_strategy._core.rules.reducescatter_rows). Allgather and
// alltoall copy the engine's result in; its size must match the result
// buffer the caller declared (shapes are static: equal rows on every rank,
// an alltoall split evenly). Barrier and join take a token of one byte; join
// writes the last rank to join into its int32 result.
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/types.h"
#include "frameworks/xla/collective_call.h"
#include "frameworks/xla/collective_ffi.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace ring {
namespace {

using xla_call::Array;
using xla_call::Attrs;

// The DataType code of an XLA element type, -1 for one ring does not support.
int32_t ring_dtype(ffi::DataType t) {
  switch (t) {
    case ffi::DataType::U8: return static_cast<int32_t>(DataType::UInt8);
    case ffi::DataType::S8: return static_cast<int32_t>(DataType::Int8);
    case ffi::DataType::S16: return static_cast<int32_t>(DataType::Int16);
    case ffi::DataType::S32: return static_cast<int32_t>(DataType::Int32);
    case ffi::DataType::S64: return static_cast<int32_t>(DataType::Int64);
    case ffi::DataType::F16: return static_cast<int32_t>(DataType::Float16);
    case ffi::DataType::BF16: return static_cast<int32_t>(DataType::BFloat16);
    case ffi::DataType::F32: return static_cast<int32_t>(DataType::Float32);
    case ffi::DataType::F64: return static_cast<int32_t>(DataType::Float64);
    case ffi::DataType::PRED: return static_cast<int32_t>(DataType::Bool);
    default: return -1;
  }
}

// An error whose message starts with ring's error class, as the TensorFlow kernels' do.
ffi::Error ring_error(ErrorKind kind, const std::string& message) {
  return ffi::Error(kind == ErrorKind::BadArgument ? ffi::ErrorCode::kInvalidArgument : ffi::ErrorCode::kInternal,
                    xla_call::error_text(kind, message));
}

ffi::Future failed(const ffi::Error& e) {
  ffi::Promise p;
  p.SetError(e);
  return ffi::Future(p);
}

Array array_of(const ffi::AnyBuffer& b) {
  Array a;
  a.data = b.untyped_data();
  a.bytes = b.size_bytes();
  a.dtype = ring_dtype(b.element_type());
  for (int64_t d : b.dimensions()) a.dims.push_back(d);
  return a;
}

// The call's arguments and results as Arrays; false when one is not an array.
bool arrays_of(ffi::RemainingArgs args, ffi::RemainingRets rets, std::vector<Array>* ins, std::vector<Array>* outs) {
  for (size_t i = 0; i < args.size(); ++i) {
    auto in = args.get<ffi::AnyBuffer>(i);
    if (!in.has_value()) return false;
    ins->push_back(array_of(*in));
  }
  for (size_t i = 0; i < rets.size(); ++i) {
    auto out = rets.get<ffi::AnyBuffer>(i);
    if (!out.has_value()) return false;
    outs->push_back(array_of(**out));
  }
  return true;
}

bool is(int64_t op, OpType t) { return op == static_cast<int64_t>(t); }

// One member in flight on the CPU: its result buffer, and the group's countdown.
struct Member {
  ffi::CountDownPromise left;
  std::string name;
  void* dst;
  size_t bytes;
  bool join;  // the result is received_splits[0], the last rank to join
};

void member_done(void* ctx, int32_t kind, const char* message, const RingResult* r) {
  std::unique_ptr<Member> m(static_cast<Member*>(ctx));
  if (kind != RING_OK) {
    m->left.CountDown(ring_error(static_cast<ErrorKind>(kind), message ? message : ""));
  } else if (m->join) {
    const int32_t last = r->nsplits > 0 ? static_cast<int32_t>(r->received_splits[0]) : -1;
    if (m->bytes == sizeof last) std::memcpy(m->dst, &last, sizeof last);
    m->left.CountDown();
  } else if (r->data && !xla_call::result_size_error(m->name, r->nbytes, m->bytes).empty()) {
    m->left.CountDown(ring_error(ErrorKind::BadArgument, xla_call::result_size_error(m->name, r->nbytes, m->bytes)));
  } else {
    if (r->data && r->nbytes) std::memcpy(m->dst, r->data, m->bytes);
    m->left.CountDown();
  }
}

// Queues the group; the members' callbacks count the future's promise down.
ffi::Future submit(const RingEngineApi* api, xla_call::Group& g, const std::vector<Array>& outs, bool join) {
  ffi::Promise promise;
  ffi::Future future(promise);
  ffi::CountDownPromise left(promise, static_cast<int64_t>(g.size()));
  std::vector<std::unique_ptr<Member>> members;
  std::vector<void*> ctxs;
  for (size_t i = 0; i < g.size(); ++i) {
    members.push_back(std::unique_ptr<Member>(new Member{left, g.name(i), outs[i].data, outs[i].bytes, join}));
    ctxs.push_back(members.back().get());
  }
  char error[512] = {0};
  const int32_t kind = api->enqueue(g.ops().data(), static_cast<int32_t>(g.size()), member_done, ctxs.data(), error,
                                    sizeof error);
  if (kind != RING_OK) return failed(ring_error(static_cast<ErrorKind>(kind), error));
  for (auto& m : members) m.release();  // member_done owns them now
  return future;
}

ffi::Future collective_cpu(ffi::RemainingArgs args, ffi::RemainingRets rets, int64_t op, std::string_view names,
                           int64_t reduce_op, double prescale, double postscale, int64_t root, int64_t process_set) {
  const Attrs c{op, reduce_op, root, process_set, prescale, postscale};
  std::vector<Array> ins, outs;
  if (!arrays_of(args, rets, &ins, &outs))
    return failed(ring_error(ErrorKind::BadArgument, "ring's FFI call takes and gives arrays"));
  try {
    const RingEngineApi* api = ring_xla_engine_api();
    xla_call::Group g(api, c, names, ins, outs);
    if (is(op, OpType::Barrier))  // the token: the engine gives no data
      for (size_t i = 0; i < g.size(); ++i) std::memset(outs[i].data, 0, outs[i].bytes);
    return submit(api, g, outs, is(op, OpType::Join));
  } catch (const RingError& e) {
    return failed(ring_error(e.kind(), e.what()));
  }
}

ffi::Error collective_cuda(void* stream, int32_t device, ffi::RemainingArgs args, ffi::RemainingRets rets, int64_t op,
                           std::string_view names, int64_t reduce_op, double prescale, double postscale, int64_t root,
                           int64_t process_set) {
  const Attrs c{op, reduce_op, root, process_set, prescale, postscale};
  std::vector<Array> ins, outs;
  if (!arrays_of(args, rets, &ins, &outs))
    return ring_error(ErrorKind::BadArgument, "ring's FFI call takes and gives arrays");
  const std::string failure = xla_call::run_on_stream(ring_xla_engine_api(), c, names, ins, outs, device,
                                                      reinterpret_cast<uint64_t>(stream));
  if (failure.empty()) return ffi::Error::Success();
  const bool bad = failure.rfind("BadArgumentError: ", 0) == 0;
  return ffi::Error(bad ? ffi::ErrorCode::kInvalidArgument : ffi::ErrorCode::kInternal, failure);
}

// The attributes both handlers bind, after their context and buffers.
template <class B>
auto with_attrs(B b) {
  return std::move(b)
      .RemainingArgs()
      .RemainingRets()
      .template Attr<int64_t>("op")
      .template Attr<std::string_view>("names")
      .template Attr<int64_t>("reduce_op")
      .template Attr<double>("prescale")
      .template Attr<double>("postscale")
      .template Attr<int64_t>("root")
      .template Attr<int64_t>("process_set");
}

}  // namespace
}  // namespace ring

XLA_FFI_DEFINE_HANDLER_SYMBOL(RingCollectiveCpu, ring::collective_cpu, ring::with_attrs(ffi::Ffi::Bind()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(RingCollectiveCuda, ring::collective_cuda,
                              ring::with_attrs(ffi::Ffi::Bind()
                                                   .Ctx<ffi::PlatformStream<void*>>()
                                                   .Ctx<ffi::DeviceOrdinal>()));
