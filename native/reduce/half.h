// Software float16 (IEEE binary16) and bfloat16 conversions, inline so the
// reduce loops can fold them in and vectorise. Integer arithmetic except an
// exact scaling by a power of two and one addition that relies on the
// default rounding mode (nearest even), so results do not depend on the CPU
// or on flush-to-zero flags.
//
// float -> half/bfloat16 rounds to nearest, ties to even; overflow gives
// infinity; NaN stays NaN (quiet, sign kept, top payload bits kept).
// half/bfloat16 -> float is exact (subnormal halves become normal floats).
#pragma once

#include <cstdint>
#include <cstring>

// The conversions sit inside the reduce loops, which vectorise only when
// they are inlined whole.
#define RING_HALF_INLINE inline __attribute__((always_inline))

namespace ring {
namespace half_detail {

RING_HALF_INLINE uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

RING_HALF_INLINE float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// cond ? a : b with a mask, so gcc keeps the float operation that computes
// `a` unconditional and the loop free of branches (with trapping math on, it
// would otherwise move the float operation into a branch).
RING_HALF_INLINE uint32_t select(bool cond, uint32_t a, uint32_t b) {
  uint32_t mask = 0u - static_cast<uint32_t>(cond);
  return (a & mask) | (b & ~mask);
}

}  // namespace half_detail

// Every case is computed and the right one selected (no branches), so gcc
// vectorises loops over these functions.
RING_HALF_INLINE float half_to_float_inline(uint16_t h) {
  using namespace half_detail;
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t em = h & 0x7fffu;  // exponent and mantissa
  // Normal: rebias the exponent from 15 to 127.
  uint32_t normal = (em << 13) + ((127u - 15u) << 23);
  // Inf/NaN: exponent all ones, mantissa (payload) kept bit for bit.
  uint32_t inf_nan = (em << 13) | 0x7f800000u;
  // Zero/subnormal: value = mantissa * 2^-24, exact and normal in float32.
  uint32_t subnormal = float_bits(static_cast<float>(static_cast<int32_t>(em)) * 0x1p-24f);
  uint32_t bits = em >= 0x7c00u ? inf_nan : normal;
  bits = select(em < 0x0400u, subnormal, bits);
  return bits_float(bits | sign);
}

// After F. Giesen's float_to_half_fast3_rtne. The subnormal case adds a
// magic 0.5f so that the float adder's own round-to-nearest-even (the
// default rounding mode) lines the 10 mantissa bits up at the bottom;
// flush-to-zero cannot change the result (float subnormals round to 0 anyway).
RING_HALF_INLINE uint16_t float_to_half_inline(float f) {
  using namespace half_detail;
  uint32_t x = float_bits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  x &= 0x7fffffffu;
  // NaN: quiet bit set, top 9 payload bits kept.
  uint32_t nan = 0x7e00u | ((x >> 13) & 0x1ffu);
  // Normal half: rebias, then round to nearest even on the 13 dropped bits.
  // From 65520 up to 65536 the carry reaches 0x7c00 = Inf, as it should.
  uint32_t normal = (x + ((15u - 127u) << 23) + 0xfffu + ((x >> 13) & 1u)) >> 13;
  // Subnormal half or zero (x < 2^-14).
  const uint32_t magic = (127u - 15u + 23u - 10u + 1u) << 23;  // 0.5f
  uint32_t subnormal = float_bits(bits_float(x) + bits_float(magic)) - magic;
  uint32_t h = select(x < (113u << 23), subnormal, normal);
  h = select(x >= 0x47800000u, 0x7c00u, h);  // >= 65536 (or Inf)
  h = select(x > 0x7f800000u, nan, h);
  return static_cast<uint16_t>(sign | h);
}

RING_HALF_INLINE float bfloat16_to_float_inline(uint16_t b) { return half_detail::bits_float(static_cast<uint32_t>(b) << 16); }

RING_HALF_INLINE uint16_t float_to_bfloat16_inline(float f) {
  uint32_t x = half_detail::float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u)  // NaN: keep sign and top payload, force quiet
    return static_cast<uint16_t>((x >> 16) | 0x0040u);
  x += 0x7fffu + ((x >> 16) & 1u);  // round to nearest even; overflow rounds to Inf
  return static_cast<uint16_t>(x >> 16);
}

// Whether reduce_into may use the CPU's float16 conversion instructions
// (F16C on x86) for float16 sum/product; on by default where the CPU has
// them. Both paths give the same bits except for NaN payloads; tests turn
// the hardware path off to cover the software one. Not thread-safe against
// concurrent reductions.
void set_f16_hardware_enabled(bool enabled);

}  // namespace ring
