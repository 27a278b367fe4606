// Reduction and scaling kernels.
//
// Each (dtype, op) pair is one simple loop over `__restrict` pointers so gcc
// auto-vectorises it at -O3 (float32/float64 sum become packed adds). The
// source may sit at any address (the collectives hand us pieces straight
// out of the transport's memory) and is read with unaligned loads; a
// misaligned destination or overlapping buffers are staged through aligned
// stack blocks (rare: the engine's buffers are aligned). On x86-64 the dispatch is built
// twice, for AVX2 and for baseline SSE2, and chosen at load time; float16
// sum/product use the F16C conversion instructions when the CPU has them.
//
// Semantics (numpy's, so the Python tests can compare against numpy):
//   - integers wrap around (computed in the unsigned type of the same width);
//   - float min/max propagate NaN (np.minimum/np.maximum);
//   - bool: Sum/Max = logical or, Min/Product = logical and, stored as 0/1;
//   - float16/bfloat16 go through float32 and are rounded back (nearest even)
//     after every operation; float32 has enough precision for that to equal
//     the correctly rounded half-precision result.
#include "reduce/reduce.h"

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>

#include "common/error.h"
#include "reduce/half.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace ring {
namespace {

// Everything below down to reduce_aligned is inlined into it, so that each
// of its clones (see RING_CLONES) carries its own vectorised loops.
#define RING_INLINE inline __attribute__((always_inline))

// ---- element operations -------------------------------------------------

// Floats. NaN in either operand propagates; on ties (0 and -0) the first
// operand, the destination, is kept.
struct FSum {
  template <class T> RING_INLINE T operator()(T a, T b) const { return a + b; }
};
struct FProd {
  template <class T> RING_INLINE T operator()(T a, T b) const { return a * b; }
};
struct FMin {
  template <class T> static RING_INLINE bool keep_first(T a, T b) { return a <= b || a != a; }
  template <class T> RING_INLINE T operator()(T a, T b) const { return keep_first(a, b) ? a : b; }
};
struct FMax {
  template <class T> static RING_INLINE bool keep_first(T a, T b) { return a >= b || a != a; }
  template <class T> RING_INLINE T operator()(T a, T b) const { return keep_first(a, b) ? a : b; }
};

// Integers wrap in the unsigned type; types narrower than int are widened to
// unsigned int so that the multiplication cannot overflow a signed int.
template <class T> struct Wide {
  using U = std::make_unsigned_t<T>;
  using W = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, U>;
  static RING_INLINE W of(T v) { return static_cast<W>(static_cast<U>(v)); }
  static RING_INLINE T back(W v) { return static_cast<T>(static_cast<U>(v)); }
};
struct ISum {
  template <class T> RING_INLINE T operator()(T a, T b) const { return Wide<T>::back(Wide<T>::of(a) + Wide<T>::of(b)); }
};
struct IProd {
  template <class T> RING_INLINE T operator()(T a, T b) const { return Wide<T>::back(Wide<T>::of(a) * Wide<T>::of(b)); }
};
struct IMin {
  template <class T> RING_INLINE T operator()(T a, T b) const { return a < b ? a : b; }
};
struct IMax {
  template <class T> RING_INLINE T operator()(T a, T b) const { return a > b ? a : b; }
};

// bool (one byte, any non-zero is true; results are 0/1).
struct BOr {
  RING_INLINE uint8_t operator()(uint8_t a, uint8_t b) const { return static_cast<uint8_t>((a != 0) | (b != 0)); }
};
struct BAnd {
  RING_INLINE uint8_t operator()(uint8_t a, uint8_t b) const { return static_cast<uint8_t>((a != 0) & (b != 0)); }
};

// float16 / bfloat16 (C = conversions): sum/product round the float32 result
// back; min/max pick the original bits, no rounding involved.
struct HalfConv {
  static RING_INLINE float to(uint16_t h) { return half_to_float_inline(h); }
  static RING_INLINE uint16_t from(float f) { return float_to_half_inline(f); }
};
struct Bf16Conv {
  static RING_INLINE float to(uint16_t h) { return bfloat16_to_float_inline(h); }
  static RING_INLINE uint16_t from(float f) { return float_to_bfloat16_inline(f); }
};
template <class C, class F> struct HArith {  // F = FSum or FProd
  RING_INLINE uint16_t operator()(uint16_t a, uint16_t b) const { return C::from(F()(C::to(a), C::to(b))); }
};
template <class C, class F> struct HPick {  // F = FMin or FMax, applied to the floats
  RING_INLINE uint16_t operator()(uint16_t a, uint16_t b) const {
    return F::keep_first(C::to(a), C::to(b)) ? a : b;
  }
};

// ---- typed loops ----------------------------------------------------------

// The source is read through memcpy: it comes straight out of transport
// memory and may sit at any address (gcc emits plain unaligned loads).
template <class T>
RING_INLINE T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

template <class T, class F>
RING_INLINE void loop(T* __restrict d, const uint8_t* __restrict s, size_t n, F f) {
  for (size_t i = 0; i < n; ++i) d[i] = f(d[i], load<T>(s + i * sizeof(T)));
}

// One switch over the op; Sum and Average share a loop.
template <class T, class Sum, class Prod, class Min, class Max>
RING_INLINE void reduce_with(T* __restrict d, const uint8_t* __restrict s, size_t n, ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Average: return loop(d, s, n, Sum());
    case ReduceOp::Product: return loop(d, s, n, Prod());
    case ReduceOp::Min: return loop(d, s, n, Min());
    case ReduceOp::Max: return loop(d, s, n, Max());
    case ReduceOp::Adasum: return;  // not element-wise; reduce_into rejects it
  }
}

template <class T>
RING_INLINE void reduce_int(void* d, const void* s, size_t n, ReduceOp op) {
  reduce_with<T, ISum, IProd, IMin, IMax>(static_cast<T*>(d), static_cast<const uint8_t*>(s), n, op);
}

template <class T>
RING_INLINE void reduce_float(void* d, const void* s, size_t n, ReduceOp op) {
  reduce_with<T, FSum, FProd, FMin, FMax>(static_cast<T*>(d), static_cast<const uint8_t*>(s), n, op);
}

template <class C>
RING_INLINE void reduce_half(void* d, const void* s, size_t n, ReduceOp op) {
  reduce_with<uint16_t, HArith<C, FSum>, HArith<C, FProd>, HPick<C, FMin>, HPick<C, FMax>>(
      static_cast<uint16_t*>(d), static_cast<const uint8_t*>(s), n, op);
}

RING_INLINE void reduce_bool(void* d, const void* s, size_t n, ReduceOp op) {
  reduce_with<uint8_t, BOr, BAnd, BAnd, BOr>(static_cast<uint8_t*>(d), static_cast<const uint8_t*>(s), n, op);
}

// ---- x86: hardware float16 conversions ---------------------------------------

#if defined(__x86_64__) && defined(__GNUC__)
// gcc builds reduce_aligned twice (AVX2 and baseline SSE2) and picks one at
// load time; the results are the same bits (vectorisation never reorders a
// reduction here: every loop is element-wise).
#define RING_CLONES __attribute__((target_clones("avx2", "default")))

// vcvtph2ps/vcvtps2ph round to nearest even like the software conversions,
// so the results are the same, except possibly which NaN payload comes out.
template <class F>
__attribute__((target("avx,f16c"))) void f16c_loop(uint16_t* d, const uint8_t* s, size_t n, F f) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 a = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(d + i)));
    __m256 b = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 2 * i)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i), _mm256_cvtps_ph(f(a, b), _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < n; ++i)
    d[i] = float_to_half_inline(f(half_to_float_inline(d[i]), half_to_float_inline(load<uint16_t>(s + 2 * i))));
}

struct V8Sum {
  __attribute__((target("avx"))) __m256 operator()(__m256 a, __m256 b) const { return _mm256_add_ps(a, b); }
  float operator()(float a, float b) const { return a + b; }
};
struct V8Prod {
  __attribute__((target("avx"))) __m256 operator()(__m256 a, __m256 b) const { return _mm256_mul_ps(a, b); }
  float operator()(float a, float b) const { return a * b; }
};

std::atomic<bool> f16_hardware_enabled{true};

bool reduce_f16_hardware(uint16_t* d, const uint8_t* s, size_t n, ReduceOp op) {
  static const bool have_f16c = __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
  if (!have_f16c || !f16_hardware_enabled.load(std::memory_order_relaxed)) return false;
  if (op == ReduceOp::Min || op == ReduceOp::Max) return false;
  if (op == ReduceOp::Product) f16c_loop(d, s, n, V8Prod());
  else f16c_loop(d, s, n, V8Sum());
  return true;
}
#else
#define RING_CLONES
std::atomic<bool> f16_hardware_enabled{false};
bool reduce_f16_hardware(uint16_t*, const uint8_t*, size_t, ReduceOp) { return false; }
#endif

// Element-aligned destination, any source, no overlap.
RING_CLONES void reduce_aligned(void* dst, const void* src, size_t n, DataType dtype, ReduceOp op) {
  switch (dtype) {
    case DataType::UInt8: return reduce_int<uint8_t>(dst, src, n, op);
    case DataType::Int8: return reduce_int<int8_t>(dst, src, n, op);
    case DataType::Int16: return reduce_int<int16_t>(dst, src, n, op);
    case DataType::Int32: return reduce_int<int32_t>(dst, src, n, op);
    case DataType::Int64: return reduce_int<int64_t>(dst, src, n, op);
    case DataType::Float32: return reduce_float<float>(dst, src, n, op);
    case DataType::Float64: return reduce_float<double>(dst, src, n, op);
    case DataType::Bool: return reduce_bool(dst, src, n, op);
    case DataType::Float16:
      if (reduce_f16_hardware(static_cast<uint16_t*>(dst), static_cast<const uint8_t*>(src), n, op)) return;
      return reduce_half<HalfConv>(dst, src, n, op);
    case DataType::BFloat16: return reduce_half<Bf16Conv>(dst, src, n, op);
  }
}

// Misaligned destination or overlapping buffers: copy blocks into aligned
// stack buffers.
void reduce_staged(uint8_t* dst, const uint8_t* src, size_t n, size_t esize, DataType dtype, ReduceOp op) {
  constexpr size_t kBlockBytes = 4096;
  alignas(64) uint8_t d_block[kBlockBytes];
  alignas(64) uint8_t s_block[kBlockBytes];
  size_t per_block = kBlockBytes / esize;
  for (size_t i = 0; i < n; i += per_block) {
    size_t k = std::min(per_block, n - i);
    std::memcpy(d_block, dst + i * esize, k * esize);
    std::memcpy(s_block, src + i * esize, k * esize);
    reduce_aligned(d_block, s_block, k, dtype, op);
    std::memcpy(dst + i * esize, d_block, k * esize);
  }
}

void check_dtype(DataType dtype, const char* what) {
  if (!is_valid_dtype(static_cast<int>(dtype)))
    throw_error(ErrorKind::BadArgument,
                std::string(what) + ": invalid dtype " + std::to_string(static_cast<int>(dtype)));
}

// ---- scaling ---------------------------------------------------------------

template <class T>
void scale_float(T* __restrict p, size_t n, T factor) {
  for (size_t i = 0; i < n; ++i) p[i] = p[i] * factor;
}

template <float (*To)(uint16_t), uint16_t (*From)(float)>
void scale_half(uint16_t* __restrict p, size_t n, float factor) {
  for (size_t i = 0; i < n; ++i) p[i] = From(To(p[i]) * factor);
}

// Multiply in double, truncate toward zero; out-of-range results saturate
// and NaN becomes 0, so no input is undefined behaviour.
template <class T>
void scale_int(T* __restrict p, size_t n, double factor) {
  const double lo = static_cast<double>(std::numeric_limits<T>::min());
  const double hi_excl = std::ldexp(1.0, std::numeric_limits<T>::digits);  // max + 1
  for (size_t i = 0; i < n; ++i) {
    double v = std::trunc(static_cast<double>(p[i]) * factor);
    T out;
    if (v != v) out = 0;
    else if (v >= hi_excl) out = std::numeric_limits<T>::max();
    else if (v <= lo) out = std::numeric_limits<T>::min();
    else out = static_cast<T>(v);
    p[i] = out;
  }
}

template <class T>
void scale_dispatch_int(void* buf, size_t n, double factor) {
  T* p = static_cast<T*>(buf);
  if (reinterpret_cast<uintptr_t>(buf) % alignof(T) == 0) return scale_int(p, n, factor);
  for (size_t i = 0; i < n; ++i) {  // misaligned: one element at a time
    T v;
    std::memcpy(&v, reinterpret_cast<uint8_t*>(buf) + i * sizeof(T), sizeof(T));
    scale_int(&v, 1, factor);
    std::memcpy(reinterpret_cast<uint8_t*>(buf) + i * sizeof(T), &v, sizeof(T));
  }
}

}  // namespace

void reduce_into(void* dst, const void* src, size_t count, DataType dtype, ReduceOp op) {
  check_dtype(dtype, "reduce_into");
  if (!is_elementwise_reduce_op(static_cast<int>(op)))
    throw_error(ErrorKind::BadArgument, "reduce_into: invalid op " + std::to_string(static_cast<int>(op)));
  if (count == 0) return;
  size_t esize = dtype_size(dtype);
  auto d = reinterpret_cast<uintptr_t>(dst), s = reinterpret_cast<uintptr_t>(src);
  bool aligned = d % esize == 0;
  size_t bytes = count * esize;
  bool overlap = d < s + bytes && s < d + bytes;
  if (aligned && !overlap)
    reduce_aligned(dst, src, count, dtype, op);
  else
    reduce_staged(static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src), count, esize, dtype, op);
}

void scale_buffer(void* buf, size_t count, DataType dtype, double factor) {
  check_dtype(dtype, "scale_buffer");
  if (dtype == DataType::Bool) throw_error(ErrorKind::BadArgument, "scale_buffer: bool tensors cannot be scaled");
  if (count == 0) return;
  if (reinterpret_cast<uintptr_t>(buf) % dtype_size(dtype) != 0 &&
      (dtype == DataType::Float16 || dtype == DataType::BFloat16 || dtype == DataType::Float32 ||
       dtype == DataType::Float64)) {
    // Rare: stage misaligned floating buffers through an aligned block.
    alignas(64) uint8_t block[4096];
    size_t esize = dtype_size(dtype), per_block = sizeof(block) / esize;
    uint8_t* p = static_cast<uint8_t*>(buf);
    for (size_t i = 0; i < count; i += per_block) {
      size_t k = std::min(per_block, count - i);
      std::memcpy(block, p + i * esize, k * esize);
      scale_buffer(block, k, dtype, factor);
      std::memcpy(p + i * esize, block, k * esize);
    }
    return;
  }
  switch (dtype) {
    case DataType::Float32: return scale_float(static_cast<float*>(buf), count, static_cast<float>(factor));
    case DataType::Float64: return scale_float(static_cast<double*>(buf), count, factor);
    case DataType::Float16:
      return scale_half<half_to_float_inline, float_to_half_inline>(static_cast<uint16_t*>(buf), count,
                                                                     static_cast<float>(factor));
    case DataType::BFloat16:
      return scale_half<bfloat16_to_float_inline, float_to_bfloat16_inline>(static_cast<uint16_t*>(buf), count,
                                                                             static_cast<float>(factor));
    case DataType::UInt8: return scale_dispatch_int<uint8_t>(buf, count, factor);
    case DataType::Int8: return scale_dispatch_int<int8_t>(buf, count, factor);
    case DataType::Int16: return scale_dispatch_int<int16_t>(buf, count, factor);
    case DataType::Int32: return scale_dispatch_int<int32_t>(buf, count, factor);
    case DataType::Int64: return scale_dispatch_int<int64_t>(buf, count, factor);
    case DataType::Bool: break;
  }
}

void set_f16_hardware_enabled(bool enabled) { f16_hardware_enabled.store(enabled); }

float half_to_float(uint16_t h) { return half_to_float_inline(h); }
uint16_t float_to_half(float f) { return float_to_half_inline(f); }
float bfloat16_to_float(uint16_t b) { return bfloat16_to_float_inline(b); }
uint16_t float_to_bfloat16(float f) { return float_to_bfloat16_inline(f); }

}  // namespace ring
