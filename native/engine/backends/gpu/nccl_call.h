// RAII helpers for the NCCL calls of one operation: its reduction
// operator and its group. Used on the engine's thread only.
#pragma once

#include "common/types.h"
#include "engine/backends/gpu/nccl_reduction.h"
#include "engine/message.h"
#include "gpu/nccl.h"
#include "reduce/half.h"

namespace ring::gpu {

// The reduction NCCL applies: a built-in operator, or a PreMulSum created
// on `comm` for this call and destroyed after it was queued.
class Reduction {
 public:
  // For request `q` over `n` ranks (it runs on NCCL: nccl_reduction.h).
  Reduction(const Request& q, int n, ncclComm_t comm) : Reduction(*nccl_reduction(q, n), q.dtype, comm) {}
  Reduction(const NcclReduction& red, DataType dtype, ncclComm_t comm) : comm_(comm) {
    op_ = red.op;
    if (!red.premul) return;
    union {
      double f64;
      float f32;
      uint16_t f16;
    } scalar;
    if (dtype == DataType::Float64) scalar.f64 = red.factor;
    if (dtype == DataType::Float32) scalar.f32 = static_cast<float>(red.factor);
    if (dtype == DataType::Float16) scalar.f16 = float_to_half_inline(static_cast<float>(red.factor));
    if (dtype == DataType::BFloat16) scalar.f16 = float_to_bfloat16_inline(static_cast<float>(red.factor));
    nccl_check(nccl_library().ncclRedOpCreatePreMulSum(&op_, &scalar, *nccl_type(dtype), ncclScalarHostImmediate,
                                                       comm),
               "ncclRedOpCreatePreMulSum", comm);
    created_ = true;
  }
  ~Reduction() {
    if (created_) nccl_library().ncclRedOpDestroy(op_, comm_);
  }
  ncclRedOp_t op() const { return op_; }

 private:
  ncclComm_t comm_;
  ncclRedOp_t op_ = ncclSum;
  bool created_ = false;
};

// ncclGroupStart / ncclGroupEnd around the calls of one operation, all on
// communicator `comm` (whose ncclGroupEnd may return ncclInProgress: nccl.h).
class Group {
 public:
  explicit Group(ncclComm_t comm) : comm_(comm) { nccl_check(nccl_library().ncclGroupStart(), "ncclGroupStart"); }
  void end() {
    ended_ = true;
    nccl_check(nccl_library().ncclGroupEnd(), "ncclGroupEnd", comm_);
  }
  ~Group() {
    if (!ended_) nccl_library().ncclGroupEnd();
  }

 private:
  ncclComm_t comm_;
  bool ended_ = false;
};

}  // namespace ring::gpu
