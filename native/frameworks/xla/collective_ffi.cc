// ring's collectives as an XLA FFI handler, target "ring_collective"
// (collective_ffi.h): JAX calls it with jax.ffi.ffi_call inside jit
// (ring_strategy/jax_ops.py), TensorFlow's jit_compile programs through the
// RingXlaCollective op's lowering (frameworks/tensorflow/xla_kernels.cc).
//
// The handler is asynchronous: it queues its buffers into the engine
// through RingEngineApi (ring_xla_engine_api()) and returns an ffi::Future
// that the engine's completion callbacks fulfil, so no XLA thread waits and
// the collectives of one program may run in any order (the engine
// negotiates them by name). CPU (host memory) only.
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
#include <vector>

#include "common/error.h"
#include "common/types.h"
#include "frameworks/xla/collective_ffi.h"
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

// One member in flight: its result buffer, and the group's countdown.
struct Member {
  ffi::CountDownPromise left;
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
  } else if (r->data && r->nbytes != m->bytes) {
    m->left.CountDown(ring_error(ErrorKind::BadArgument,
                                 "the result has " + std::to_string(r->nbytes) + " bytes; the call declared " +
                                     std::to_string(m->bytes) +
                                     " (an allgather of unequal rows, or an alltoall of unequal splits?)"));
  } else {
    if (r->data && r->nbytes) std::memcpy(m->dst, r->data, m->bytes);
    m->left.CountDown();
  }
}

// Where a member's shape and splits live until the group is queued.
struct Layout {
  std::vector<int64_t> dims, splits;
};

bool is(int64_t op, OpType t) { return op == static_cast<int64_t>(t); }

// The rows an alltoall sends to each rank of the set: an even split, since
// XLA's shapes are static (every rank receives what it sends).
std::vector<int64_t> even_splits(const Call& c, const std::string& name, int64_t rows) {
  const RingEngineApi* api = ring_xla_engine_api();
  if (!api) throw_error(ErrorKind::Shutdown, "ring's engine is not loaded: import ring_strategy");
  int64_t size = 0;
  char error[512] = {0};
  const int32_t kind = api->query(RING_QUERY_SET_SIZE, static_cast<int32_t>(c.process_set), &size, error,
                                  sizeof error);
  if (kind != RING_OK) throw_error(static_cast<ErrorKind>(kind), error);
  if (size <= 0 || rows % size)
    throw_error(ErrorKind::BadArgument, "tensor '" + name + "': an alltoall in compiled code splits its " +
                                            std::to_string(rows) + " rows evenly over the set's " +
                                            std::to_string(size) + " ranks, and they do not divide");
  return std::vector<int64_t>(static_cast<size_t>(size), rows / size);
}

// The RingOpArgs of argument `in` into result `out` (shape and splits kept in `lay`).
RingOpArgs member(const Call& c, const std::string& name, const ffi::AnyBuffer& in, ffi::AnyBuffer& out,
                  Layout* lay) {
  DataType dtype;
  if (!ring_dtype(in.element_type(), &dtype))
    throw_error(ErrorKind::BadArgument, "tensor '" + name + "': ring does not support this dtype");
  for (int64_t d : in.dimensions()) lay->dims.push_back(d);
  if (is(c.op, OpType::Alltoall)) {
    if (lay->dims.empty()) throw_error(ErrorKind::BadArgument, "tensor '" + name + "': alltoall needs rows");
    lay->splits = even_splits(c, name, lay->dims[0]);
  }
  RingOpArgs a{};
  a.name = name.c_str();
  a.op = static_cast<int32_t>(c.op);
  a.dtype = static_cast<int32_t>(dtype);
  a.reduce_op = static_cast<int32_t>(c.reduce_op);
  a.root = static_cast<int32_t>(c.root);
  a.prescale = c.prescale;
  a.postscale = c.postscale;
  a.shape = lay->dims.data();
  a.ndim = static_cast<int32_t>(lay->dims.size());
  a.splits = lay->splits.data();
  a.nsplits = static_cast<int32_t>(lay->splits.size());
  a.process_set = static_cast<int32_t>(c.process_set);
  a.input = in.untyped_data();
  a.input_bytes = in.size_bytes();
  if (is(c.op, OpType::Allreduce) || is(c.op, OpType::Broadcast) || is(c.op, OpType::Reducescatter)) {
    a.output = out.untyped_data();
    a.output_bytes = out.size_bytes();
  } else if (is(c.op, OpType::Barrier)) {
    std::memset(out.untyped_data(), 0, out.size_bytes());  // the token: the engine gives no data
  }
  return a;
}

// Queues the group; the members' callbacks count `left` down.
ffi::Future submit(const std::vector<RingOpArgs>& group, const std::vector<std::pair<void*, size_t>>& outs,
                   bool join) {
  const RingEngineApi* api = ring_xla_engine_api();
  if (!api) return failed(ring_error(ErrorKind::Shutdown, "ring's engine is not loaded: import ring_strategy"));
  ffi::Promise promise;
  ffi::Future future(promise);
  ffi::CountDownPromise left(promise, static_cast<int64_t>(group.size()));
  std::vector<std::unique_ptr<Member>> members;
  std::vector<void*> ctxs;
  for (const auto& o : outs) {
    members.push_back(std::unique_ptr<Member>(new Member{left, o.first, o.second, join}));
    ctxs.push_back(members.back().get());
  }
  char error[512] = {0};
  const int32_t kind = api->enqueue(group.data(), static_cast<int32_t>(group.size()), member_done, ctxs.data(),
                                    error, sizeof error);
  if (kind != RING_OK) return failed(ring_error(static_cast<ErrorKind>(kind), error));
  for (auto& m : members) m.release();  // member_done owns them now
  return future;
}

ffi::Future collective(ffi::RemainingArgs args, ffi::RemainingRets rets, int64_t op, std::string_view names,
                       int64_t reduce_op, double prescale, double postscale, int64_t root, int64_t process_set) {
  const Call c{op, reduce_op, root, process_set, prescale, postscale};
  const std::vector<std::string> each = split_names(names);
  // Arguments past the named ones only order this call after another.
  const size_t n = each.size();
  if (args.size() < n || rets.size() != n)
    return failed(ring_error(ErrorKind::BadArgument, "ring's FFI call needs one result and one name per argument"));
  if (op < 0 || op >= kNumOpTypes) return failed(ring_error(ErrorKind::BadArgument, "unknown operation"));
  std::vector<RingOpArgs> group;
  std::vector<Layout> lays(n);
  std::vector<std::pair<void*, size_t>> outs;  // where an engine-allocated result is copied
  try {
    for (size_t i = 0; i < n; ++i) {
      auto in = args.get<ffi::AnyBuffer>(i);
      auto out = rets.get<ffi::AnyBuffer>(i);
      if (!in.has_value() || !out.has_value())
        throw_error(ErrorKind::BadArgument, "ring's FFI call takes and gives arrays");
      group.push_back(member(c, each[i], *in, **out, &lays[i]));
      outs.emplace_back((*out)->untyped_data(), (*out)->size_bytes());
    }
  } catch (const RingError& e) {
    return failed(ring_error(e.kind(), e.what()));
  }
  return submit(group, outs, is(op, OpType::Join));
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
