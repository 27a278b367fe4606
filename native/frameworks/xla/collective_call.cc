// collective_call.h: one XLA custom call as a group of engine operations,
// and the CUDA handler's call on XLA's stream.
#include "frameworks/xla/collective_call.h"

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>

#include "common/types.h"

namespace ring::xla_call {
namespace {

bool is(int64_t op, OpType t) { return op == static_cast<int64_t>(t); }

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

// The rows an alltoall sends to each rank of the set: an even split, since
// XLA's shapes are static (every rank receives what it sends).
std::vector<int64_t> even_splits(const RingEngineApi* api, const Attrs& c, const std::string& name, int64_t rows) {
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

}  // namespace

std::string error_text(ErrorKind kind, const std::string& message) {
  static const char* const kClass[] = {"RingError",        "BadArgumentError", "MismatchError",
                                       "PeerFailureError", "RingTimeoutError", "ShutdownError"};
  const int k = static_cast<int>(kind);
  return std::string(kClass[is_valid_error_kind(k) ? k : 0]) + ": " + message;
}

bool engine_allocates(int64_t op) { return is(op, OpType::Allgather) || is(op, OpType::Alltoall); }

std::string result_size_error(const std::string& name, size_t got, size_t declared) {
  if (got == declared) return "";
  return "tensor '" + name + "': the result has " + std::to_string(got) + " bytes; the call declared " +
         std::to_string(declared) + " (an allgather of unequal rows, or an alltoall of unequal splits?)";
}

Group::Group(const RingEngineApi* api, const Attrs& c, std::string_view names, const std::vector<Array>& args,
             const std::vector<Array>& rets)
    : names_(split_names(names)) {
  const size_t n = names_.size();
  if (!api) throw_error(ErrorKind::Shutdown, "ring's engine is not loaded: import ring_strategy");
  if (args.size() < n || rets.size() != n)
    throw_error(ErrorKind::BadArgument, "ring's FFI call needs one result and one name per argument");
  if (c.op < 0 || c.op >= kNumOpTypes) throw_error(ErrorKind::BadArgument, "unknown operation");
  dims_.resize(n);
  splits_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const Array& in = args[i];
    const std::string& name = names_[i];
    if (in.dtype < 0)
      throw_error(ErrorKind::BadArgument, "tensor '" + name + "': ring does not support this dtype");
    dims_[i] = in.dims;
    if (is(c.op, OpType::Alltoall)) {
      if (dims_[i].empty()) throw_error(ErrorKind::BadArgument, "tensor '" + name + "': alltoall needs rows");
      splits_[i] = even_splits(api, c, name, dims_[i][0]);
    }
    RingOpArgs a{};
    a.name = name.c_str();
    a.op = static_cast<int32_t>(c.op);
    a.dtype = in.dtype;
    a.reduce_op = static_cast<int32_t>(c.reduce_op);
    a.root = static_cast<int32_t>(c.root);
    a.prescale = c.prescale;
    a.postscale = c.postscale;
    a.shape = dims_[i].data();
    a.ndim = static_cast<int32_t>(dims_[i].size());
    a.splits = splits_[i].data();
    a.nsplits = static_cast<int32_t>(splits_[i].size());
    a.process_set = static_cast<int32_t>(c.process_set);
    a.input = in.data;
    a.input_bytes = in.bytes;
    if (is(c.op, OpType::Allreduce) || is(c.op, OpType::Broadcast) || is(c.op, OpType::Reducescatter)) {
      a.output = rets[i].data;
      a.output_bytes = rets[i].bytes;
    }
    ops_.push_back(a);
  }
}

namespace {

// The group's completion on the GPU path: counts the members' callbacks
// down and keeps the first failure; wait() returns once all have come.
struct StreamGroup {
  StreamGroup(const RingEngineApi* a, int32_t d, uint64_t s, size_t n) : api(a), device(d), stream(s), left(n) {}
  const RingEngineApi* api;
  int32_t device;
  uint64_t stream;
  std::mutex mu;
  std::condition_variable cv;
  size_t left;
  std::string failure;

  void finish(const std::string& error) {
    std::lock_guard<std::mutex> lock(mu);
    if (failure.empty()) failure = error;
    if (--left == 0) cv.notify_all();
  }
  std::string wait() {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return left == 0; });
    return failure;
  }
};

struct StreamMember {
  StreamGroup* group;
  std::string name;
  void* dst;
  size_t bytes;
  bool copy;  // the engine allocates the result: copy it into dst
};

// Runs on the engine's thread while the result is valid: a result the
// engine allocated is copied into the member's buffer on the group's
// stream now, before the engine may reuse its memory.
void stream_member_done(void* ctx, int32_t kind, const char* message, const RingResult* r) {
  auto* m = static_cast<StreamMember*>(ctx);
  if (kind != RING_OK) return m->group->finish(error_text(static_cast<ErrorKind>(kind), message ? message : ""));
  if (!m->copy) return m->group->finish("");
  const void* src = r->device_data ? r->device_data : r->data;
  const size_t got = r->device_data ? r->device_bytes : r->nbytes;
  std::string error = result_size_error(m->name, got, m->bytes);
  if (!error.empty()) return m->group->finish(error_text(ErrorKind::BadArgument, error));
  char text[512] = {0};
  const int32_t k = m->group->api->copy_to_device(m->group->device, m->group->stream, m->dst, src, m->bytes, text,
                                                  sizeof text);
  m->group->finish(k == RING_OK ? "" : error_text(static_cast<ErrorKind>(k), text));
}

}  // namespace

std::string run_on_stream(const RingEngineApi* api, const Attrs& attrs, std::string_view names,
                          const std::vector<Array>& args, const std::vector<Array>& rets, int32_t device,
                          uint64_t stream) {
  if (api && api->size < offsetof(RingEngineApi, enqueue_stream_ordered) + sizeof(api->enqueue_stream_ordered))
    return error_text(ErrorKind::Internal, "ring's engine interface is older than this library: rebuild it");
  if (is(attrs.op, OpType::Barrier) || is(attrs.op, OpType::Join))
    return error_text(ErrorKind::BadArgument, "barrier and join are not compiled for the GPU: call them outside "
                                              "jit (ring_strategy.barrier, ring_strategy.join)");
  try {
    Group g(api, attrs, names, args, rets);
    StreamGroup done(api, device, stream, g.size());
    std::vector<StreamMember> members;
    members.reserve(g.size());
    std::vector<void*> ctxs;
    for (size_t i = 0; i < g.size(); ++i) {
      RingOpArgs& a = g.ops()[i];
      a.device_type = 1;  // CUDA
      a.device_index = device;
      a.stream = stream;
      members.push_back({&done, g.name(i), rets[i].data, rets[i].bytes, engine_allocates(attrs.op)});
      ctxs.push_back(&members.back());
    }
    if (g.size() == 0) return "";
    char error[512] = {0};
    const int32_t kind = api->enqueue_stream_ordered(g.ops().data(), static_cast<int32_t>(g.size()),
                                                     stream_member_done, ctxs.data(), error, sizeof error);
    if (kind != RING_OK) return error_text(static_cast<ErrorKind>(kind), error);
    return done.wait();
  } catch (const RingError& e) {
    return error_text(e.kind(), e.what());
  }
}

}  // namespace ring::xla_call
