#include "common/types.h"

namespace ring {

size_t dtype_size(DataType t) {
  switch (t) {
    case DataType::UInt8: case DataType::Int8: case DataType::Bool: return 1;
    case DataType::Int16: case DataType::Float16: case DataType::BFloat16: return 2;
    case DataType::Int32: case DataType::Float32: return 4;
    case DataType::Int64: case DataType::Float64: return 8;
  }
  return 0;
}

const char* dtype_name(DataType t) {
  static const char* names[kNumDataTypes] = {"uint8",   "int8",     "int16",   "int32",   "int64",
                                             "float16", "bfloat16", "float32", "float64", "bool"};
  int i = static_cast<int>(t);
  return i >= 0 && i < kNumDataTypes ? names[i] : "unknown";
}

const char* reduce_op_name(ReduceOp op) {
  static const char* names[kNumReduceOps] = {"Sum", "Average", "Min", "Max", "Product", "Adasum"};
  int i = static_cast<int>(op);
  return i >= 0 && i < kNumReduceOps ? names[i] : "unknown";
}

bool is_valid_dtype(int v) { return v >= 0 && v < kNumDataTypes; }
bool is_valid_reduce_op(int v) { return v >= 0 && v < kNumReduceOps; }
bool is_elementwise_reduce_op(int v) { return is_valid_reduce_op(v) && v != static_cast<int>(ReduceOp::Adasum); }

bool is_floating(DataType t) {
  return t == DataType::Float16 || t == DataType::BFloat16 || t == DataType::Float32 || t == DataType::Float64;
}

}  // namespace ring
