// Element-wise reduction and scaling kernels, one loop per dtype.
//
// float16 and bfloat16 are computed in float32 and rounded back (round to
// nearest even) after every operation, so results do not depend on the CPU.
// Average is not a kernel: the collectives reduce with Sum and the engine
// scales afterwards.
#pragma once

#include <cstddef>

#include "common/types.h"

namespace ring {

// dst[i] = dst[i] (op) src[i] for i < count. Average behaves as Sum.
// bool: Sum and Max are logical or, Min and Product logical and.
// Integers wrap around on overflow, as numpy does.
void reduce_into(void* dst, const void* src, size_t count, DataType dtype, ReduceOp op);

// buf[i] = buf[i] * factor for i < count. Floating types multiply in their
// own precision (float16/bfloat16 via float32, float64 in double);
// integers multiply in double and round toward zero. bool is unsupported
// (the engine rejects scaling of bool before it gets here).
void scale_buffer(void* buf, size_t count, DataType dtype, double factor);

// Conversions used by the kernels and the tests.
float half_to_float(uint16_t h);
uint16_t float_to_half(float f);
float bfloat16_to_float(uint16_t b);
uint16_t float_to_bfloat16(float f);

}  // namespace ring
