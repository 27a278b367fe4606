// What ring's XLA FFI handlers (collective_ffi.cc) do, apart from XLA's
// types: one custom call's attributes and arrays turned into a group of the
// engine's operations (RingEngineApi), and, for GPU memory, the whole call
// (run_on_stream). No XLA or CUDA headers: compiled into every library that
// compiles collective_ffi.cc, and into the extension module for the tests
// that drive run_on_stream against the engine (tests/gpu/test_xla_stream.py).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "frameworks/engine_api.h"

// Hidden: two libraries of one process that compile this keep their own.
#pragma GCC visibility push(hidden)

namespace ring::xla_call {

// The custom call's attributes (collective_ffi.cc's header says each one).
struct Attrs {
  int64_t op = 0, reduce_op = 0, root = 0, process_set = 0;
  double prescale = 1.0, postscale = 1.0;
};

// One argument or result of the call: its memory (host or GPU, as the
// handler's platform), size, element type (a DataType code; -1: one ring
// does not support) and dimensions.
struct Array {
  void* data = nullptr;
  size_t bytes = 0;
  int32_t dtype = -1;
  std::vector<int64_t> dims;
};

// "<ErrorClass>: message", the form the TensorFlow kernels give too, so
// Python maps a handler's failure to ring's exception class.
std::string error_text(ErrorKind kind, const std::string& message);

// The call's operations, built from its arrays; owns what they point to.
class Group {
 public:
  // Pairs args[i] with rets[i] under the i-th of `names` ('\n'-separated);
  // arguments past the named ones only order the call after another.
  // Throws RingError(BadArgument) for a call that does not fit (counts,
  // unknown operation or dtype, an alltoall's rows that do not split
  // evenly over the set: `api` answers the set's size).
  Group(const RingEngineApi* api, const Attrs& attrs, std::string_view names, const std::vector<Array>& args,
        const std::vector<Array>& rets);
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;

  // One per named argument; output set where the engine writes in place
  // (allreduce, broadcast, reducescatter), null where it allocates the
  // result (allgather, alltoall; barrier and join give none).
  std::vector<RingOpArgs>& ops() { return ops_; }
  const std::string& name(size_t i) const { return names_[i]; }
  size_t size() const { return ops_.size(); }

 private:
  std::vector<std::string> names_;
  std::vector<std::vector<int64_t>> dims_, splits_;
  std::vector<RingOpArgs> ops_;
};

// True when the engine allocates `op`'s result, which the handler then
// copies into the result buffer (allgather, alltoall).
bool engine_allocates(int64_t op);

// "" when a result of `got` bytes fits a result buffer of `declared`,
// else why not (for the error of tensor `name`).
std::string result_size_error(const std::string& name, size_t got, size_t declared);

// The CUDA handler's logic: the call on arrays in the GPU memory of GPU
// `device`, produced on `stream` (a CUstream, XLA's). Queues the group
// with that stream, the torch front end's stream contract (engine_api.h,
// engine/backends/gpu/nccl_backend.h), through enqueue_stream_ordered: the
// engine's work waits for an event recorded on `stream` at enqueue, and
// an operation run on NCCL completes as soon as the engine has queued its
// work and made `stream` wait for that work's event (async completion,
// whatever RING_ENABLE_ASYNC_COMPLETION says); one staged through host
// memory completes once its results are back in GPU memory. Results the
// engine allocates are copied into rets on `stream`
// (RingEngineApi.copy_to_device) from the completion callback, before
// the engine may reuse their memory. Work queued on `stream` after this
// returns sees the results. Blocks the calling thread until every
// operation of the group has completed in that sense: the negotiation
// with the other ranks and the enqueue of the GPU work, not the work.
// Returns "" or error_text() of the first failure. Barrier and join are
// refused (their tokens live on the host).
std::string run_on_stream(const RingEngineApi* api, const Attrs& attrs, std::string_view names,
                          const std::vector<Array>& args, const std::vector<Array>& rets, int32_t device,
                          uint64_t stream);

}  // namespace ring::xla_call

#pragma GCC visibility pop
