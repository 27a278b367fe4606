// Element types and reduction operators shared by every layer of the engine.
//
// The numeric values are part of the Python API (exported through the
// binding), so never renumber them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ring {

// The collective an operation runs.
enum class OpType : uint8_t { Allreduce = 0, Allgather, Broadcast, Alltoall, Reducescatter, Barrier, Join };
constexpr int kNumOpTypes = static_cast<int>(OpType::Join) + 1;

enum class DataType : uint8_t {
  UInt8 = 0,
  Int8 = 1,
  Int16 = 2,
  Int32 = 3,
  Int64 = 4,
  Float16 = 5,
  BFloat16 = 6,
  Float32 = 7,
  Float64 = 8,
  Bool = 9,
};
constexpr int kNumDataTypes = static_cast<int>(DataType::Bool) + 1;

enum class ReduceOp : uint8_t {
  Sum = 0,
  Average = 1,  // the collectives reduce with Sum; the engine scales by 1/n
  Min = 2,
  Max = 3,
  Product = 4,
  // Adaptive summation of whole tensors (collectives/adasum.cc): allreduce
  // only, floating dtypes only, a power-of-two number of ranks. Not an
  // element-wise kernel.
  Adasum = 5,
};
constexpr int kNumReduceOps = static_cast<int>(ReduceOp::Adasum) + 1;

// Bytes per element.
size_t dtype_size(DataType t);
const char* dtype_name(DataType t);
const char* reduce_op_name(ReduceOp op);
bool is_valid_dtype(int v);
bool is_valid_reduce_op(int v);
// True for the ops the element-wise kernels (reduce/reduce.h) implement.
bool is_elementwise_reduce_op(int v);
bool is_floating(DataType t);

}  // namespace ring
