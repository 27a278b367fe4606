#include "engine/backends/gpu/nccl_reduction.h"

namespace ring::gpu {

std::optional<ncclDataType_t> nccl_type(DataType dtype) {
  switch (dtype) {
    case DataType::UInt8: return ncclUint8;
    case DataType::Int8: return ncclInt8;
    case DataType::Int32: return ncclInt32;
    case DataType::Int64: return ncclInt64;
    case DataType::Float16: return ncclFloat16;
    case DataType::BFloat16: return ncclBfloat16;
    case DataType::Float32: return ncclFloat32;
    case DataType::Float64: return ncclFloat64;
    case DataType::Int16:
    case DataType::Bool: return std::nullopt;
  }
  return std::nullopt;
}

namespace {

bool is_float(DataType d) {
  return d == DataType::Float16 || d == DataType::BFloat16 || d == DataType::Float32 || d == DataType::Float64;
}

}  // namespace

std::optional<NcclReduction> nccl_reduction(const Request& q, int n) {
  if (!nccl_type(q.dtype)) return std::nullopt;
  const bool unscaled = q.prescale == 1.0 && q.postscale == 1.0;
  NcclReduction red;
  switch (q.reduce_op) {
    case ReduceOp::Min: red.op = ncclMin; break;
    case ReduceOp::Max: red.op = ncclMax; break;
    case ReduceOp::Product: red.op = ncclProd; break;
    case ReduceOp::Sum:
    case ReduceOp::Average: {
      const bool average = q.reduce_op == ReduceOp::Average;
      if (!is_float(q.dtype)) {
        if (average || !unscaled) return std::nullopt;
        return red;  // ncclSum
      }
      if (unscaled) {
        red.op = average ? ncclAvg : ncclSum;
        return red;
      }
      red.premul = true;
      red.factor = q.prescale * q.postscale / (average ? n : 1);
      return red;
    }
    case ReduceOp::Adasum: return std::nullopt;
  }
  if (!unscaled) return std::nullopt;
  return red;
}

HierarchicalReduction hierarchical_reduction(const NcclReduction& red, int n) {
  HierarchicalReduction h;
  h.local = red;
  if (red.premul) return h;
  switch (red.op) {
    case ncclMin: h.cross = ReduceOp::Min; break;
    case ncclMax: h.cross = ReduceOp::Max; break;
    case ncclProd: h.cross = ReduceOp::Product; break;
    case ncclAvg:
      h.local.op = ncclSum;
      h.local.premul = true;
      h.local.factor = 1.0 / n;
      break;
    case ncclSum: break;
  }
  return h;
}

bool runs_on_nccl(const Response& r, const Request& q, int n) {
  switch (r.op) {
    case OpType::Allreduce:
    case OpType::Reducescatter: return nccl_reduction(q, n).has_value();
    case OpType::Allgather:
    case OpType::Broadcast:
    case OpType::Alltoall: return true;  // bytes: any dtype
    case OpType::Barrier:
    case OpType::Join: return false;
  }
  return false;
}

}  // namespace ring::gpu
