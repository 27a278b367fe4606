// ring's TensorFlow kernels: each collective is an AsyncOpKernel that
// queues its tensors into the engine through RingEngineApi (engine_api.h)
// and returns; the engine's completion callback fills the outputs and
// calls done(). No TensorFlow thread waits, so a graph may hold any number
// of collectives, run in any order. GPU kernels (built when TensorFlow was
// built with CUDA) hand the engine the op's stream.
//
// One exception: an eager op, whose kernel TensorFlow runs on the Python
// thread and blocks until done(). Called through the front end's
// answer_signals (RingEngineApi.signals), the kernel waits there itself and
// runs Python's signal handlers while it waits, so Ctrl-C and SIGALRM come
// out of an eager collective as out of ring's other waits.
//
// The library is loaded by ring_strategy/tensorflow/native_ops.py, which
// then calls ring_tf_set_engine_api() with the extension's RingEngineApi.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/types.h"
#include "frameworks/engine_api.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#if GOOGLE_CUDA
#include "tensorflow/core/platform/stream_executor.h"
#endif

namespace {

using ::tensorflow::AsyncOpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;

const RingEngineApi* g_api = nullptr;  // set once by ring_tf_set_engine_api

// The ring error class a message starts with ("PeerFailureError: ..."), so
// the Python front end raises the same exception as the other front ends
// (native_ops.py) and elastic training recognises a lost peer in a graph's
// error (ring_strategy/elastic/loop.py).
const char* const kErrorClass[] = {"RingError",        "BadArgumentError", "MismatchError",
                                   "PeerFailureError", "RingTimeoutError", "ShutdownError"};

absl::Status ring_status(int32_t kind, const std::string& message) {
  const bool known = kind >= 0 && kind < static_cast<int32_t>(sizeof(kErrorClass) / sizeof(kErrorClass[0]));
  const std::string text = std::string(kErrorClass[known ? kind : 0]) + ": " + message;
  switch (static_cast<ring::ErrorKind>(kind)) {
    case ring::ErrorKind::BadArgument: return absl::InvalidArgumentError(text);
    case ring::ErrorKind::Mismatch: return absl::FailedPreconditionError(text);
    case ring::ErrorKind::PeerFailure: return absl::AbortedError(text);
    case ring::ErrorKind::Timeout: return absl::DeadlineExceededError(text);
    case ring::ErrorKind::Shutdown: return absl::FailedPreconditionError(text);
    default: return absl::InternalError(text);
  }
}

absl::Status no_api() {
  return ring_status(static_cast<int32_t>(ring::ErrorKind::Shutdown),
                     "the op library was loaded without ring's engine: import ring_strategy.tensorflow");
}

// The engine's DataType code of a TensorFlow dtype; false when it has none.
bool ring_dtype(tensorflow::DataType t, int32_t* code) {
  using ring::DataType;
  DataType d;
  switch (t) {
    case tensorflow::DT_UINT8: d = DataType::UInt8; break;
    case tensorflow::DT_INT8: d = DataType::Int8; break;
    case tensorflow::DT_INT16: d = DataType::Int16; break;
    case tensorflow::DT_INT32: d = DataType::Int32; break;
    case tensorflow::DT_INT64: d = DataType::Int64; break;
    case tensorflow::DT_HALF: d = DataType::Float16; break;
    case tensorflow::DT_BFLOAT16: d = DataType::BFloat16; break;
    case tensorflow::DT_FLOAT: d = DataType::Float32; break;
    case tensorflow::DT_DOUBLE: d = DataType::Float64; break;
    case tensorflow::DT_BOOL: d = DataType::Bool; break;
    default: return false;
  }
  *code = static_cast<int32_t>(d);
  return true;
}

// The engine name in string input `index` (element `i` of a vector).
std::string name_input(OpKernelContext* ctx, int index, int64_t i = 0) {
  const Tensor& t = ctx->input(index);
  return i < t.NumElements() ? std::string(t.flat<tensorflow::tstring>()(i)) : std::string();
}

// Fills the output a finished member produced (none: the output was given).
using Finish = std::function<absl::Status(OpKernelContext*, const RingResult&)>;

// One kernel invocation's operations in flight: done() runs once the last
// member finished, with the first error any member met. A kernel that
// waits on its calling thread (waiting) is woken instead and calls done()
// itself; if it gave up (abandoned), the members only release the group.
struct Group {
  OpKernelContext* ctx;
  AsyncOpKernel::DoneCallback done;
  std::atomic<int> left{0};
  std::mutex mu;  // guards what follows, and ctx while a member fills outputs
  absl::Status status;
  std::vector<Finish> finish;               // per member; empty function: nothing to fill
  std::vector<std::vector<int64_t>> shapes;  // per member, kept until the engine copied them
  std::vector<std::pair<Group*, int>> members;
  bool waiting = false;
  bool finished = false;   // every member completed (a waiting group)
  bool abandoned = false;  // the waiter gave up: ctx is gone
  std::condition_variable finished_cv;
  std::vector<Tensor> keep;  // an abandoned group's inputs and outputs, alive until the engine is done
};

// done() of a group whose members all completed.
void complete(Group* g, OpKernelContext* ctx, AsyncOpKernel::DoneCallback done) {
  if (!g->status.ok()) ctx->SetStatus(g->status);
  delete g;
  done();
}

void member_done(void* arg, int32_t kind, const char* message, const RingResult* result) {
  auto* m = static_cast<std::pair<Group*, int>*>(arg);
  Group* g = m->first;
  {
    std::lock_guard<std::mutex> lock(g->mu);
    if (g->abandoned) {
    } else if (kind != RING_OK) {
      if (g->status.ok()) g->status = ring_status(kind, message ? message : "");
    } else if (g->finish[m->second]) {
      absl::Status s = g->finish[m->second](g->ctx, *result);
      if (!s.ok() && g->status.ok()) g->status = s;
    }
  }
  if (g->left.fetch_sub(1) != 1) return;
  std::unique_lock<std::mutex> lock(g->mu);
  if (g->abandoned) {
    lock.unlock();
    delete g;
  } else if (g->waiting) {
    g->finished = true;
    g->finished_cv.notify_all();
  } else {
    lock.unlock();
    complete(g, g->ctx, std::move(g->done));
  }
}

// Waits for a waiting group's members on the calling thread, running
// Python's signal handlers every 0.1 s; false when a handler raised
// (the group is then abandoned: its last member deletes it).
bool wait_answering_signals(Group* g, OpKernelContext* ctx) {
  std::unique_lock<std::mutex> lock(g->mu);
  while (!g->finished_cv.wait_for(lock, std::chrono::milliseconds(100), [g] { return g->finished; })) {
    lock.unlock();
    const bool raised = g_api->signals(RING_SIGNALS_RUN) != 0;
    lock.lock();
    if (raised && !g->finished) {
      for (int i = 0; i < ctx->num_inputs(); ++i) g->keep.push_back(ctx->input(i));
      for (int i = 0; i < ctx->num_outputs(); ++i)
        if (ctx->mutable_output(i)) g->keep.push_back(*ctx->mutable_output(i));
      g->abandoned = true;
      return false;
    }
  }
  return true;
}

// The device and stream fields of `a` for this kernel's device.
void place(OpKernelContext* ctx, RingOpArgs* a) {
  a->device_type = 0;
  a->device_index = 0;
  a->stream = 0;
#if GOOGLE_CUDA
  if (ctx->op_device_context() && ctx->op_device_context()->stream()) {
    auto* stream = ctx->op_device_context()->stream();
    a->device_type = 1;
    a->device_index = stream->parent()->device_ordinal();
    a->stream = reinterpret_cast<uint64_t>(stream->platform_specific_handle().stream);
  }
#else
  (void)ctx;
#endif
}

class RingKernel : public AsyncOpKernel {
 public:
  explicit RingKernel(OpKernelConstruction* c) : AsyncOpKernel(c) {
    if (c->HasAttr("process_set_id")) OP_REQUIRES_OK(c, c->GetAttr("process_set_id", &process_set_));
  }

 protected:
  // Args of one operation on `in` (output: where the result goes, or null).
  // shape is kept alive by the group.
  absl::Status args(OpKernelContext* ctx, int32_t op, const std::string& name, const Tensor& in, Tensor* out,
                    std::vector<int64_t>& shape, RingOpArgs* a) const {
    std::memset(a, 0, sizeof(*a));
    if (!ring_dtype(in.dtype(), &a->dtype))
      return absl::InvalidArgumentError("ring does not support tensors of dtype " +
                                        tensorflow::DataTypeString(in.dtype()));
    shape.clear();
    for (int d = 0; d < in.dims(); ++d) shape.push_back(in.dim_size(d));
    a->name = name.c_str();
    a->op = op;
    a->prescale = a->postscale = 1.0;
    a->shape = shape.data();
    a->ndim = static_cast<int32_t>(shape.size());
    a->process_set = static_cast<int32_t>(process_set_);
    a->input = in.tensor_data().data();
    a->input_bytes = in.tensor_data().size();
    if (out) {
      a->output = const_cast<char*>(out->tensor_data().data());
      a->output_bytes = out->tensor_data().size();
    }
    place(ctx, a);
    return absl::OkStatus();
  }

  // Queues `ops` (one per member of `g`, whose finish/shapes are filled);
  // done() is called by the last member's completion, or here on refusal,
  // or, on a thread that answers signals, here once the members completed.
  void submit(OpKernelContext* ctx, DoneCallback done, Group* g, std::vector<RingOpArgs>& ops) const {
    if (!g_api) {
      delete g;
      ctx->SetStatus(no_api());
      done();
      return;
    }
    const int n = static_cast<int>(ops.size());
    g->ctx = ctx;
    g->waiting = g_api->signals(RING_SIGNALS_ASK) != 0;
    if (!g->waiting) g->done = std::move(done);
    g->left = n;
    g->members.resize(n);
    std::vector<void*> ctxs(n);
    for (int i = 0; i < n; ++i) {
      g->members[i] = {g, i};
      ctxs[i] = &g->members[i];
    }
    char error[1024];
    const int32_t kind = g_api->enqueue(ops.data(), n, &member_done, ctxs.data(), error, sizeof(error));
    if (kind != RING_OK) {
      DoneCallback d = g->waiting ? std::move(done) : std::move(g->done);
      delete g;
      ctx->SetStatus(ring_status(kind, error));
      d();
      return;
    }
    if (!g->waiting) return;
    if (wait_answering_signals(g, ctx)) {
      complete(g, ctx, std::move(done));
      return;
    }
    // The front end raises the handler's exception in place of this status.
    ctx->SetStatus(absl::CancelledError("RingInterrupted: a Python signal handler raised while the op waited"));
    done();
  }

  int64_t process_set_ = 0;
};

// Moves a result the engine allocated (its shape known only once the ranks
// agreed) into a new output `index` of the kernel whose engine arguments
// are `a`: a host output by memcpy; a GPU output (a GPU kernel: device_type
// 1) by RingEngineApi.copy_to_device on the op's stream, queued before the
// engine may reuse the result's memory. The output comes from TensorFlow's
// allocator on the engine's thread, as any async kernel's may.
Finish copy_result(int index, const RingOpArgs& a) {
  const bool gpu = a.device_type == 1;
  const int32_t device = a.device_index;
  const uint64_t stream = a.stream;
  return [index, gpu, device, stream](OpKernelContext* ctx, const RingResult& r) -> absl::Status {
    TensorShape shape;
    for (int32_t i = 0; i < r.ndim; ++i) TF_RETURN_IF_ERROR(shape.AddDimWithStatus(r.shape[i]));
    Tensor* out = nullptr;
    TF_RETURN_IF_ERROR(ctx->allocate_output(index, shape, &out));
    const void* src = r.device_data ? r.device_data : r.data;
    const size_t bytes = r.device_data ? r.device_bytes : r.nbytes;
    if (out->tensor_data().size() != bytes)
      return absl::InternalError("ring: the engine's result has " + std::to_string(bytes) + " bytes, not " +
                                 std::to_string(out->tensor_data().size()));
    void* dst = const_cast<char*>(out->tensor_data().data());
    if (!bytes) return absl::OkStatus();
    if (!gpu) {
      if (r.device_data) return absl::InternalError("ring: a GPU result for a host output");
      std::memcpy(dst, src, bytes);
      return absl::OkStatus();
    }
    char error[512];
    const int32_t kind = g_api->copy_to_device(device, stream, dst, src, bytes, error, sizeof(error));
    return kind == RING_OK ? absl::OkStatus() : ring_status(kind, error);
  };
}

// Allreduce and grouped allreduce: results written in place of the outputs
// (an input TensorFlow no longer needs is reused as its output).
class AllreduceKernel : public RingKernel {
 public:
  explicit AllreduceKernel(OpKernelConstruction* c) : RingKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("reduce_op", &reduce_op_));
    OP_REQUIRES_OK(c, c->GetAttr("prescale_factor", &prescale_));
    OP_REQUIRES_OK(c, c->GetAttr("postscale_factor", &postscale_));
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const int n = ctx->num_inputs() - 1;  // the tensors, then their names
    OP_REQUIRES_ASYNC(ctx, ctx->input(n).NumElements() == n,
                      absl::InvalidArgumentError("ring: one tensor name per input is needed"), done);
    std::vector<std::string> names(n);
    for (int i = 0; i < n; ++i) names[i] = name_input(ctx, n, i);
    auto* g = new Group;
    g->finish.resize(n);
    g->shapes.resize(n);
    std::vector<RingOpArgs> ops(n);
    for (int i = 0; i < n; ++i) {
      Tensor* out = nullptr;
      absl::Status s = ctx->forward_input_or_allocate_output({i}, i, ctx->input(i).shape(), &out);
      if (s.ok()) s = args(ctx, static_cast<int32_t>(ring::OpType::Allreduce), names[i], ctx->input(i), out,
                           g->shapes[i], &ops[i]);
      if (!s.ok()) {
        delete g;
        ctx->SetStatus(s);
        done();
        return;
      }
      ops[i].reduce_op = static_cast<int32_t>(reduce_op_);
      ops[i].prescale = prescale_;
      ops[i].postscale = postscale_;
    }
    submit(ctx, std::move(done), g, ops);
  }

 private:
  int64_t reduce_op_ = 0;
  float prescale_ = 1.0f, postscale_ = 1.0f;
};

// Allgather, reducescatter, broadcast: one tensor, one result.
class SingleKernel : public RingKernel {
 public:
  SingleKernel(OpKernelConstruction* c, ring::OpType op) : RingKernel(c), op_(op) {
    if (c->HasAttr("reduce_op")) OP_REQUIRES_OK(c, c->GetAttr("reduce_op", &reduce_op_));
    if (c->HasAttr("root_rank")) OP_REQUIRES_OK(c, c->GetAttr("root_rank", &root_));
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const std::string name = name_input(ctx, 1);
    auto* g = new Group;
    g->finish.resize(1);
    g->shapes.resize(1);
    std::vector<RingOpArgs> ops(1);
    Tensor* out = nullptr;
    absl::Status s;
    if (op_ == ring::OpType::Broadcast) s = ctx->forward_input_or_allocate_output({0}, 0, ctx->input(0).shape(), &out);
    if (s.ok()) s = args(ctx, static_cast<int32_t>(op_), name, ctx->input(0), out, g->shapes[0], &ops[0]);
    if (op_ != ring::OpType::Broadcast) g->finish[0] = copy_result(0, ops[0]);
    if (!s.ok()) {
      delete g;
      ctx->SetStatus(s);
      done();
      return;
    }
    ops[0].reduce_op = static_cast<int32_t>(reduce_op_);
    ops[0].root = static_cast<int32_t>(root_);
    submit(ctx, std::move(done), g, ops);
  }

 private:
  ring::OpType op_;
  int64_t reduce_op_ = 0;
  int64_t root_ = 0;
};

class AllgatherKernel : public SingleKernel {
 public:
  explicit AllgatherKernel(OpKernelConstruction* c) : SingleKernel(c, ring::OpType::Allgather) {}
};
class BroadcastKernel : public SingleKernel {
 public:
  explicit BroadcastKernel(OpKernelConstruction* c) : SingleKernel(c, ring::OpType::Broadcast) {}
};
class ReducescatterKernel : public SingleKernel {
 public:
  explicit ReducescatterKernel(OpKernelConstruction* c) : SingleKernel(c, ring::OpType::Reducescatter) {}
};

// Alltoall: the received rows and, as a second output, how many came from each rank.
class AlltoallKernel : public RingKernel {
 public:
  explicit AlltoallKernel(OpKernelConstruction* c) : RingKernel(c) {}

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const std::string name = name_input(ctx, 2);
    auto* g = new Group;
    g->shapes.resize(2);
    std::vector<RingOpArgs> ops(1);
    absl::Status s = args(ctx, static_cast<int32_t>(ring::OpType::Alltoall), name, ctx->input(0), nullptr,
                          g->shapes[0], &ops[0]);
    // received_splits is a host output on every device (HostMemory on GPUs).
    g->finish.push_back([rows = copy_result(0, ops[0])](OpKernelContext* k, const RingResult& r) -> absl::Status {
      TF_RETURN_IF_ERROR(rows(k, r));
      Tensor* received = nullptr;
      TF_RETURN_IF_ERROR(k->allocate_output(1, TensorShape({r.nsplits}), &received));
      auto flat = received->flat<int32_t>();
      for (int32_t i = 0; i < r.nsplits; ++i) flat(i) = static_cast<int32_t>(r.received_splits[i]);
      return absl::OkStatus();
    });
    if (s.ok()) s = splits(ctx, g->shapes[1]);
    if (!s.ok()) {
      delete g;
      ctx->SetStatus(s);
      done();
      return;
    }
    ops[0].splits = g->shapes[1].data();
    ops[0].nsplits = static_cast<int32_t>(g->shapes[1].size());
    submit(ctx, std::move(done), g, ops);
  }

 private:
  // The splits input, or even blocks of the rows over the set when empty.
  absl::Status splits(OpKernelContext* ctx, std::vector<int64_t>& out) const {
    const Tensor& t = ctx->input(1);
    auto flat = t.flat<int64_t>();
    out.assign(flat.data(), flat.data() + flat.size());
    if (!out.empty()) return absl::OkStatus();
    if (!g_api) return no_api();
    int64_t n = 0;
    char error[512];
    const int32_t kind = g_api->query(RING_QUERY_SET_SIZE, static_cast<int32_t>(process_set_), &n, error,
                                      sizeof(error));
    if (kind != RING_OK) return ring_status(kind, error);
    const int64_t rows = ctx->input(0).dims() ? ctx->input(0).dim_size(0) : 0;
    if (n <= 0 || rows % n)
      return ring_status(static_cast<int32_t>(ring::ErrorKind::BadArgument),
                         "alltoall without splits needs a first dimension divisible by the set's size (" +
                             std::to_string(n) + "). Got: " + std::to_string(rows));
    out.assign(n, rows / n);
    return absl::OkStatus();
  }
};

// Join and barrier: a one-byte token; join's result is the last rank to join.
class TokenKernel : public RingKernel {
 public:
  TokenKernel(OpKernelConstruction* c, ring::OpType op) : RingKernel(c), op_(op) {}

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    // join: the engine's one join name (ring_strategy.ops.join)
    const std::string name = op_ == ring::OpType::Join ? std::string("join") : name_input(ctx, 0);
    auto* g = new Group;
    g->shapes.push_back({1});
    if (op_ == ring::OpType::Join) {
      g->finish.push_back([](OpKernelContext* k, const RingResult& r) -> absl::Status {
        Tensor* out = nullptr;
        TF_RETURN_IF_ERROR(k->allocate_output(0, TensorShape({}), &out));
        out->scalar<int32_t>()() = r.nsplits > 0 ? static_cast<int32_t>(r.received_splits[0]) : -1;
        return absl::OkStatus();
      });
    } else {
      g->finish.emplace_back();
    }
    std::vector<RingOpArgs> ops(1);
    std::memset(ops.data(), 0, sizeof(RingOpArgs));
    RingOpArgs& a = ops[0];
    a.name = name.c_str();
    a.op = static_cast<int32_t>(op_);
    a.dtype = static_cast<int32_t>(ring::DataType::UInt8);
    a.prescale = a.postscale = 1.0;
    a.shape = g->shapes[0].data();
    a.ndim = 1;
    a.process_set = static_cast<int32_t>(process_set_);
    a.input = &token_;
    a.input_bytes = 1;
    submit(ctx, std::move(done), g, ops);
  }

 private:
  ring::OpType op_;
  const uint8_t token_ = 0;
};

class JoinKernel : public TokenKernel {
 public:
  explicit JoinKernel(OpKernelConstruction* c) : TokenKernel(c, ring::OpType::Join) {}
};
class BarrierKernel : public TokenKernel {
 public:
  explicit BarrierKernel(OpKernelConstruction* c) : TokenKernel(c, ring::OpType::Barrier) {}
};

// A RingQuery's value when the op runs (synchronous: no network).
class QueryKernel : public tensorflow::OpKernel {
 public:
  explicit QueryKernel(OpKernelConstruction* c) : OpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("query", &query_));
    OP_REQUIRES_OK(c, c->GetAttr("process_set_id", &process_set_));
  }

  void Compute(OpKernelContext* ctx) override {
    OP_REQUIRES(ctx, g_api != nullptr, no_api());
    int64_t value = 0;
    char error[512];
    const int32_t kind = g_api->query(static_cast<int32_t>(query_), static_cast<int32_t>(process_set_), &value,
                                      error, sizeof(error));
    OP_REQUIRES(ctx, kind == RING_OK, ring_status(kind, error));
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &out));
    out->scalar<int32_t>()() = static_cast<int32_t>(value);
  }

 private:
  int64_t query_ = 0;
  int64_t process_set_ = 0;
};

}  // namespace

using ::tensorflow::DEVICE_CPU;
REGISTER_KERNEL_BUILDER(Name("RingAllreduce").Device(DEVICE_CPU), AllreduceKernel);
REGISTER_KERNEL_BUILDER(Name("RingGroupedAllreduce").Device(DEVICE_CPU), AllreduceKernel);
REGISTER_KERNEL_BUILDER(Name("RingAllgather").Device(DEVICE_CPU), AllgatherKernel);
REGISTER_KERNEL_BUILDER(Name("RingBroadcast").Device(DEVICE_CPU), BroadcastKernel);
REGISTER_KERNEL_BUILDER(Name("RingAlltoall").Device(DEVICE_CPU), AlltoallKernel);
REGISTER_KERNEL_BUILDER(Name("RingReducescatter").Device(DEVICE_CPU), ReducescatterKernel);
REGISTER_KERNEL_BUILDER(Name("RingJoin").Device(DEVICE_CPU), JoinKernel);
REGISTER_KERNEL_BUILDER(Name("RingBarrier").Device(DEVICE_CPU), BarrierKernel);
REGISTER_KERNEL_BUILDER(Name("RingQuery").Device(DEVICE_CPU), QueryKernel);
#if GOOGLE_CUDA
// GPU tensors reach the engine's NCCL path on the op's stream. Results the
// engine allocates (allgather, alltoall, reducescatter) are copied into
// TensorFlow's output on that stream (copy_result). Names, splits and join's
// and barrier's tokens stay in host memory.
using ::tensorflow::DEVICE_GPU;
REGISTER_KERNEL_BUILDER(Name("RingAllreduce").Device(DEVICE_GPU).HostMemory("tensor_name"), AllreduceKernel);
REGISTER_KERNEL_BUILDER(Name("RingGroupedAllreduce").Device(DEVICE_GPU).HostMemory("tensor_names"), AllreduceKernel);
REGISTER_KERNEL_BUILDER(Name("RingAllgather").Device(DEVICE_GPU).HostMemory("tensor_name"), AllgatherKernel);
REGISTER_KERNEL_BUILDER(Name("RingBroadcast").Device(DEVICE_GPU).HostMemory("tensor_name"), BroadcastKernel);
REGISTER_KERNEL_BUILDER(Name("RingAlltoall")
                            .Device(DEVICE_GPU)
                            .HostMemory("splits")
                            .HostMemory("tensor_name")
                            .HostMemory("received_splits"),
                        AlltoallKernel);
REGISTER_KERNEL_BUILDER(Name("RingReducescatter").Device(DEVICE_GPU).HostMemory("tensor_name"), ReducescatterKernel);
REGISTER_KERNEL_BUILDER(Name("RingJoin").Device(DEVICE_GPU).HostMemory("last_rank"), JoinKernel);
REGISTER_KERNEL_BUILDER(Name("RingBarrier").Device(DEVICE_GPU).HostMemory("tensor_name"), BarrierKernel);
REGISTER_KERNEL_BUILDER(Name("RingQuery").Device(DEVICE_GPU).HostMemory("value"), QueryKernel);
#endif

namespace ring {
// The engine xla_kernels.cc's custom calls queue into (collective_ffi.h).
__attribute__((visibility("hidden"))) const RingEngineApi* ring_xla_engine_api() { return g_api; }
}  // namespace ring

// Hands the library the extension's engine interface; 0 when accepted, 1
// for an interface of another version (the library must be rebuilt).
extern "C" __attribute__((visibility("default"))) int ring_tf_set_engine_api(const void* api) {
  const auto* a = static_cast<const RingEngineApi*>(api);
  if (!a || a->version != RING_ENGINE_API_VERSION || a->size < sizeof(RingEngineApi)) return 1;
  g_api = a;
  return 0;
}
