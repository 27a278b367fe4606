// The lowering of RingXlaCollective (ops.cc) for XLA-compiled TensorFlow
// (jit_compile=True): one custom call of the "ring_collective" FFI handler
// (frameworks/xla/collective_ffi.cc), which this library registers with
// TensorFlow's XLA when it is loaded: for the host platform, and for CUDA
// where TensorFlow is built with it (XLA's stream goes to the engine). The handler
// queues into the engine kernels.cc was handed (ring_tf_set_engine_api) and
// completes asynchronously, as the op kernels do.
//
// Compiled separately from the other sources: TensorFlow's XLA headers need
// missing_headers/ and libtensorflow_cc; ring_strategy/_op_build.py leaves
// this file out (and jit_compile keeps its clear error) when they fail.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "collectives/slices.h"
#include "common/types.h"
#include "frameworks/xla/collective_ffi.h"
#include "tensorflow/compiler/tf2xla/xla_op_kernel.h"
#include "tensorflow/compiler/tf2xla/xla_op_registry.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "xla/hlo/builder/xla_builder.h"
#include "xla/shape_util.h"

namespace xla::ffi {
const XLA_FFI_Api* GetXlaFfiApi();  // TensorFlow's XLA FFI registry (libtensorflow_cc)
}  // namespace xla::ffi

namespace {

using ::tensorflow::TensorShape;
using ::tensorflow::XlaOpKernelContext;

// `s` as an MLIR string literal (the handler's attributes are parsed as one
// MLIR dictionary): quotes, backslashes and non-printable bytes escaped.
std::string mlir_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char ch : s) {
    if (ch == '"' || ch == '\\' || ch < 0x20 || ch >= 0x7f) {
      char hex[4];
      std::snprintf(hex, sizeof hex, "\\%02X", ch);
      out += hex;
    } else {
      out += static_cast<char>(ch);
    }
  }
  return out + "\"";
}

std::string mlir_f64(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17e", v);
  return std::string(buf) + " : f64";
}

std::string mlir_i64(int64_t v) { return std::to_string(v) + " : i64"; }

class XlaCollective : public tensorflow::XlaOpKernel {
 public:
  explicit XlaCollective(tensorflow::OpKernelConstruction* c) : XlaOpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("collective", &collective_));
    OP_REQUIRES_OK(c, c->GetAttr("names", &names_));
    OP_REQUIRES_OK(c, c->GetAttr("reduce_op", &reduce_op_));
    OP_REQUIRES_OK(c, c->GetAttr("prescale_factor", &prescale_));
    OP_REQUIRES_OK(c, c->GetAttr("postscale_factor", &postscale_));
    OP_REQUIRES_OK(c, c->GetAttr("root_rank", &root_));
    OP_REQUIRES_OK(c, c->GetAttr("process_set_id", &process_set_));
  }

  void Compile(XlaOpKernelContext* ctx) override {
    std::vector<xla::XlaOp> ins, after;
    std::vector<TensorShape> shapes, after_shapes;
    OP_REQUIRES_OK(ctx, ctx->InputList("tensors", &ins, &shapes));
    OP_REQUIRES_OK(ctx, ctx->InputList("after", &after, &after_shapes));
    OP_REQUIRES(ctx, names_.size() == ins.size(),
                absl::InvalidArgumentError("RingXlaCollective needs one name per tensor"));
    std::vector<xla::Shape> outs;
    for (size_t i = 0; i < ins.size(); ++i) {
      absl::StatusOr<xla::Shape> s = ctx->builder()->GetShape(ins[i]);
      OP_REQUIRES_OK(ctx, s.status());
      outs.push_back(*s);
      OP_REQUIRES_OK(ctx, result_shape(names_[i], &outs.back()));
    }
    std::vector<xla::XlaOp> operands = ins;
    operands.insert(operands.end(), after.begin(), after.end());
    xla::XlaOp call = xla::CustomCall(ctx->builder(), RING_XLA_COLLECTIVE_TARGET, operands,
                                      xla::ShapeUtil::MakeTupleShape(outs), attributes(), /*has_side_effect=*/true,
                                      {}, nullptr, xla::CustomCallSchedule::SCHEDULE_NONE,
                                      xla::CustomCallApiVersion::API_VERSION_TYPED_FFI);
    for (size_t i = 0; i < ins.size(); ++i) ctx->SetOutput(static_cast<int>(i), xla::GetTupleElement(call, i));
  }

 private:
  // The handler's attributes (collective_ffi.cc), as an MLIR dictionary.
  std::string attributes() const {
    std::string names;
    for (size_t i = 0; i < names_.size(); ++i) names += (i ? "\n" : "") + names_[i];
    return "{op = " + mlir_i64(collective_) + ", names = " + mlir_string(names) +
           ", reduce_op = " + mlir_i64(reduce_op_) + ", prescale = " + mlir_f64(prescale_) +
           ", postscale = " + mlir_f64(postscale_) + ", root = " + mlir_i64(root_) +
           ", process_set = " + mlir_i64(process_set_) + "}";
  }

  // Turns the shape of an input into its result's: an allgather's rows times
  // the set's size (equal rows on every rank under XLA), a reducescatter's
  // this rank's share (slices.h, the engine's rule); others keep the shape
  // (an alltoall's even blocks: the handler checks that the rows divide).
  absl::Status result_shape(const std::string& name, xla::Shape* out) const {
    const bool gather = collective_ == static_cast<int64_t>(ring::OpType::Allgather);
    const bool scatter = collective_ == static_cast<int64_t>(ring::OpType::Reducescatter);
    const bool blocks = scatter || collective_ == static_cast<int64_t>(ring::OpType::Alltoall);
    if (!gather && !blocks) return absl::OkStatus();
    if (out->dimensions().empty())
      return absl::InvalidArgumentError("BadArgumentError: '" + name + "' needs at least one dimension (rows)");
    int64_t size = 0, rank = 0;
    TF_RETURN_IF_ERROR(query(RING_QUERY_SET_SIZE, &size));
    if (gather) out->set_dimensions(0, out->dimensions(0) * size);
    if (scatter) {
      TF_RETURN_IF_ERROR(query(RING_QUERY_SET_RANK, &rank));
      if (rank < 0)
        return absl::InvalidArgumentError("BadArgumentError: '" + name + "': this rank is not in the process set");
      out->set_dimensions(0, static_cast<int64_t>(ring::slice_count(static_cast<size_t>(out->dimensions(0)),
                                                                    static_cast<int>(size),
                                                                    static_cast<int>(rank))));
    }
    return absl::OkStatus();
  }

  absl::Status query(int32_t what, int64_t* n) const {
    const RingEngineApi* api = ring::ring_xla_engine_api();
    if (!api) return absl::FailedPreconditionError("ShutdownError: ring's engine is not loaded");
    char error[512] = {0};
    if (api->query(what, static_cast<int32_t>(process_set_), n, error, sizeof error) != RING_OK)
      return absl::InvalidArgumentError(std::string("BadArgumentError: ") + error);
    return absl::OkStatus();
  }

  int64_t collective_ = 0, reduce_op_ = 0, root_ = 0, process_set_ = 0;
  float prescale_ = 1.0f, postscale_ = 1.0f;
  std::vector<std::string> names_;
};

// Registers `handler` for `platform` with TensorFlow's XLA; false when refused.
bool register_handler(const char* platform, XLA_FFI_Handler* handler) {
  const XLA_FFI_Api* api = xla::ffi::GetXlaFfiApi();
  XLA_FFI_Handler_Register_Args args;
  std::memset(&args, 0, sizeof args);
  args.struct_size = XLA_FFI_Handler_Register_Args_STRUCT_SIZE;
  args.name = XLA_FFI_ByteSpan{RING_XLA_COLLECTIVE_TARGET, std::strlen(RING_XLA_COLLECTIVE_TARGET)};
  args.platform = XLA_FFI_ByteSpan{platform, std::strlen(platform)};
  args.bundle.execute = handler;
  XLA_FFI_Error* e = api->XLA_FFI_Handler_Register(&args);
  if (!e) return true;
  XLA_FFI_Error_Destroy_Args d;
  std::memset(&d, 0, sizeof d);
  d.struct_size = XLA_FFI_Error_Destroy_Args_STRUCT_SIZE;
  d.error = e;
  api->XLA_FFI_Error_Destroy(&d);
  return false;
}

// Registers the handlers with TensorFlow's XLA once, at load: the host's,
// and, where TensorFlow is built with CUDA, the GPU's (platform "CUDA").
struct RegisterHandler {
  RegisterHandler() {
    registered = register_handler("Host", RingCollectiveCpu);
#if GOOGLE_CUDA
    registered_gpu = register_handler("CUDA", RingCollectiveCuda);
#endif
  }
  bool registered = false;
  bool registered_gpu = false;
};

const RegisterHandler kRegistered;

}  // namespace

// Registered as a kernel of XLA's compilation devices directly: XLA turns
// REGISTER_XLA_OP entries into such kernels only once per process, when its
// devices first start, which is usually before ring loads this library.
// XLA_GPU_JIT only where TensorFlow is built with CUDA (the GPU handler,
// collective_call.h's run_on_stream, is registered then); elsewhere a GPU
// program is refused while TensorFlow compiles it, naming this op.
namespace tensorflow {
REGISTER_KERNEL_BUILDER(Name("RingXlaCollective").Device(DEVICE_CPU_XLA_JIT), XlaCollective);
#if GOOGLE_CUDA
REGISTER_KERNEL_BUILDER(Name("RingXlaCollective").Device(DEVICE_GPU_XLA_JIT), XlaCollective);
#endif
}  // namespace tensorflow

// 1 when jit_compile programs can call ring's collectives (the lowering is
// built and the handler registered); ring_strategy/_native_ops.py asks.
extern "C" __attribute__((visibility("default"))) int ring_tf_has_xla() { return kRegistered.registered ? 1 : 0; }
// 1 when GPU jit_compile programs can too (TensorFlow built with CUDA, the
// GPU handler registered).
extern "C" __attribute__((visibility("default"))) int ring_tf_has_xla_gpu() {
  return kRegistered.registered_gpu ? 1 : 0;
}
