// The TensorFlow operations of ring: their signatures and shape functions.
// Kernels live in kernels.cc; gradients are registered in Python
// (ring_strategy/tensorflow/native_ops.py), as Horovod's are.
//
// Engine names arrive as string inputs, not attributes: eager calls name
// each operation anew, and an attribute would make every call a new kernel
// in TensorFlow's cache.
//
// Collectives are not stateful: like any other op, one whose result is not
// used is pruned, and tf.function does not chain them with automatic
// control dependencies, so the collectives of one step run in any order
// and the engine negotiates them by name. Queries, join and barrier are
// stateful: they run at every execution and are never folded.
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

using ::tensorflow::shape_inference::DimensionHandle;
using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

namespace {

// The dtypes the engine reduces and moves (common/types.h's DataType).
#define RING_TYPES "{uint8, int8, int16, int32, int64, half, bfloat16, float, double, bool}"

// Input `i`'s shape with an unknown first dimension (at least one dimension).
absl::Status unknown_rows(InferenceContext* c, int i, ShapeHandle* out) {
  ShapeHandle in;
  TF_RETURN_IF_ERROR(c->WithRankAtLeast(c->input(i), 1, &in));
  return c->ReplaceDim(in, 0, c->UnknownDim(), out);
}

}  // namespace

REGISTER_OP("RingAllreduce")
    .Attr("T: " RING_TYPES)
    .Attr("reduce_op: int")
    .Attr("prescale_factor: float = 1.0")
    .Attr("postscale_factor: float = 1.0")
    .Attr("process_set_id: int = 0")
    .Input("tensor: T")
    .Input("tensor_name: string")
    .Output("reduced: T")
    .SetShapeFn(::tensorflow::shape_inference::UnchangedShape)
    .Doc("The reduction of `tensor` over the ranks of the process set (ring_strategy.tensorflow.allreduce).");

REGISTER_OP("RingGroupedAllreduce")
    .Attr("T: list(" RING_TYPES ") >= 1")
    .Attr("reduce_op: int")
    .Attr("prescale_factor: float = 1.0")
    .Attr("postscale_factor: float = 1.0")
    .Attr("process_set_id: int = 0")
    .Input("tensors: T")
    .Input("tensor_names: string")
    .Output("reduced: T")
    .SetShapeFn([](InferenceContext* c) {
      for (int i = 0; i < c->num_outputs(); ++i) c->set_output(i, c->input(i));
      return absl::OkStatus();
    })
    .Doc("Every tensor reduced, queued as one group (the engine fuses them).");

REGISTER_OP("RingAllgather")
    .Attr("T: " RING_TYPES)
    .Attr("process_set_id: int = 0")
    .Input("tensor: T")
    .Input("tensor_name: string")
    .Output("gathered: T")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle out;
      TF_RETURN_IF_ERROR(unknown_rows(c, 0, &out));
      c->set_output(0, out);
      return absl::OkStatus();
    })
    .Doc("Every rank's `tensor` concatenated along the first dimension, in rank order.");

REGISTER_OP("RingBroadcast")
    .Attr("T: " RING_TYPES)
    .Attr("root_rank: int")
    .Attr("process_set_id: int = 0")
    .Input("tensor: T")
    .Input("tensor_name: string")
    .Output("broadcast: T")
    .SetShapeFn(::tensorflow::shape_inference::UnchangedShape)
    .Doc("`root_rank`'s `tensor` on every rank.");

REGISTER_OP("RingAlltoall")
    .Attr("T: " RING_TYPES)
    .Attr("process_set_id: int = 0")
    .Input("tensor: T")
    .Input("splits: int64")
    .Input("tensor_name: string")
    .Output("received: T")
    .Output("received_splits: int32")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle out;
      TF_RETURN_IF_ERROR(unknown_rows(c, 0, &out));
      c->set_output(0, out);
      c->set_output(1, c->Vector(c->UnknownDim()));
      return absl::OkStatus();
    })
    .Doc("Rows of `tensor` sent to each rank (`splits`; empty: even blocks) and the rows received.");

REGISTER_OP("RingReducescatter")
    .Attr("T: " RING_TYPES)
    .Attr("reduce_op: int")
    .Attr("process_set_id: int = 0")
    .Input("tensor: T")
    .Input("tensor_name: string")
    .Output("scattered: T")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle out;
      TF_RETURN_IF_ERROR(unknown_rows(c, 0, &out));
      c->set_output(0, out);
      return absl::OkStatus();
    })
    .Doc("This rank's block of rows of the reduction of `tensor`.");

REGISTER_OP("RingJoin")
    .Output("last_rank: int32")
    .SetIsStateful()
    .SetShapeFn(::tensorflow::shape_inference::ScalarShape)
    .Doc("Declares that this rank ran out of data; gives the rank that joined last.");

REGISTER_OP("RingBarrier")
    .Attr("process_set_id: int = 0")
    .Input("tensor_name: string")
    .SetIsStateful()
    .SetShapeFn(::tensorflow::shape_inference::NoOutputs)
    .Doc("Completes once every rank of the process set has run its barrier.");

REGISTER_OP("RingQuery")
    .Attr("query: int")
    .Attr("process_set_id: int = 0")
    .Output("value: int32")
    .SetIsStateful()
    .SetShapeFn(::tensorflow::shape_inference::ScalarShape)
    .Doc("rank, size, local rank, local size, a process set's size or this rank's index in it, when it runs.");

// The collectives inside XLA-compiled code (jit_compile=True), lowered by
// xla_kernels.cc to the "ring_collective" custom call (no CPU or GPU
// kernels: it runs only compiled). Names are attributes here: XLA compiles
// no string tensors, and a compiled program is traced once. `after` orders
// this call behind the previous collective of the same function (unread);
// `collective` is the engine's OpType: allreduce, allgather or broadcast.
REGISTER_OP("RingXlaCollective")
    .Attr("T: list(" RING_TYPES ") >= 1")
    .Attr("A: list(type) >= 0")
    .Attr("collective: int")
    .Attr("names: list(string)")
    .Attr("reduce_op: int = 0")
    .Attr("prescale_factor: float = 1.0")
    .Attr("postscale_factor: float = 1.0")
    .Attr("root_rank: int = 0")
    .Attr("process_set_id: int = 0")
    .Input("tensors: T")
    .Input("after: A")
    .Output("results: T")
    .SetShapeFn([](InferenceContext* c) {
      int64_t collective = 0;
      TF_RETURN_IF_ERROR(c->GetAttr("collective", &collective));
      for (int i = 0; i < c->num_outputs(); ++i) {
        ShapeHandle out = c->input(i);
        // OpType::Allgather (1) and Reducescatter (4): rows known once the set is
        if (collective == 1 || collective == 4) TF_RETURN_IF_ERROR(unknown_rows(c, i, &out));
        c->set_output(i, out);
      }
      return absl::OkStatus();
    })
    .Doc("ring's allreduce, allgather, broadcast, alltoall (even blocks) or reducescatter of every tensor, "
         "compiled by XLA.");
