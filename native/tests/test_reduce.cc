// Reduce kernels and float16/bfloat16 conversions against straightforward
// references: every dtype x op, integer wrap-around, NaN/Inf/subnormals,
// misaligned and aliased buffers.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

#include "common/error.h"
#include "reduce/half.h"
#include "reduce/reduce.h"
#include "tests/harness.h"

using ring::DataType;
using ring::ReduceOp;

namespace {

uint32_t fbits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float bitsf(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

const ReduceOp kOps[] = {ReduceOp::Sum, ReduceOp::Average, ReduceOp::Min, ReduceOp::Max, ReduceOp::Product};

// ---- conversion references -------------------------------------------------

// binary16 -> double from the definition.
double half_reference(uint16_t h) {
  int sign = h >> 15, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  double mag;
  if (exp == 0) mag = std::ldexp(mant, -24);
  else if (exp == 31) mag = mant ? std::numeric_limits<double>::quiet_NaN() : INFINITY;
  else mag = std::ldexp(1024 + mant, exp - 25);
  return sign ? -mag : mag;
}

// half_reference, but with Inf standing for 2^16, the value IEEE rounding
// uses as the "next" half above the largest finite one.
double half_rounding_value(uint32_t h) { return h == 0x7c00u ? 65536.0 : half_reference(static_cast<uint16_t>(h)); }

// Nearest representable of `values(k)` (monotone in k for k in [0, kmax]),
// ties to even k: the straightforward definition of round-to-nearest-even.
template <class F>
uint32_t nearest_even(double v, uint32_t k_lo, F value) {
  double lo = value(k_lo), hi = value(k_lo + 1);
  double dlo = v - lo, dhi = hi - v;
  if (dlo < dhi) return k_lo;
  if (dhi < dlo) return k_lo + 1;
  return (k_lo & 1) ? k_lo + 1 : k_lo;
}

}  // namespace

TEST(half_to_float_every_value) {
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = ring::half_to_float(static_cast<uint16_t>(h));
    double ref = half_reference(static_cast<uint16_t>(h));
    if (std::isnan(ref)) {
      CHECK(std::isnan(f));
      CHECK_EQ(fbits(f) & 0x80000000u, (h & 0x8000u) << 16);
      CHECK_EQ((fbits(f) >> 13) & 0x3ffu, h & 0x3ffu);  // payload kept
    } else {
      CHECK_EQ(fbits(f), fbits(static_cast<float>(ref)));  // exact, signed zero included
    }
  }
}

TEST(float_to_half_round_trip_and_ties) {
  for (uint32_t h = 0; h < 65536; ++h) {
    if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu)) continue;  // NaN
    CHECK_EQ(ring::float_to_half(ring::half_to_float(static_cast<uint16_t>(h))), h);
  }
  // Every midpoint between consecutive positive halves (finite and up to Inf)
  // is a tie: it must go to the even one; one float ulp away it must not.
  for (uint32_t h = 0; h < 0x7c00u; ++h) {
    double mid = (half_reference(h) + half_rounding_value(h + 1)) / 2;
    float fm = static_cast<float>(mid);
    CHECK_EQ(static_cast<double>(fm), mid);  // exactly representable
    uint32_t even = (h & 1) ? h + 1 : h;
    CHECK_EQ(ring::float_to_half(fm), even);
    CHECK_EQ(ring::float_to_half(-fm), even | 0x8000u);
    CHECK_EQ(ring::float_to_half(std::nextafter(fm, 0.0f)), h);
    CHECK_EQ(ring::float_to_half(std::nextafter(fm, INFINITY)), h + 1);
  }
}

TEST(float_to_half_special_values) {
  CHECK_EQ(ring::float_to_half(INFINITY), 0x7c00);
  CHECK_EQ(ring::float_to_half(-INFINITY), 0xfc00);
  CHECK_EQ(ring::float_to_half(65504.0f), 0x7bff);
  CHECK_EQ(ring::float_to_half(65519.99f), 0x7bff);
  CHECK_EQ(ring::float_to_half(65520.0f), 0x7c00);  // tie, rounds to even = Inf
  CHECK_EQ(ring::float_to_half(1e10f), 0x7c00);
  CHECK_EQ(ring::float_to_half(std::numeric_limits<float>::max()), 0x7c00);
  CHECK_EQ(ring::float_to_half(0.0f), 0x0000);
  CHECK_EQ(ring::float_to_half(-0.0f), 0x8000);
  CHECK_EQ(ring::float_to_half(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  CHECK_EQ(ring::float_to_half(std::ldexp(1.0f, -25)), 0x0000);  // tie -> even (0)
  CHECK_EQ(ring::float_to_half(std::ldexp(3.0f, -25)), 0x0002);  // tie -> even (2)
  CHECK_EQ(ring::float_to_half(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  CHECK_EQ(ring::float_to_half(std::ldexp(1023.5f, -24)), 0x0400);  // tie, carries into normal
  CHECK_EQ(ring::float_to_half(std::numeric_limits<float>::denorm_min()), 0x0000);
  CHECK_EQ(ring::float_to_half(-std::numeric_limits<float>::denorm_min()), 0x8000);
  for (float nan : {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
                    std::numeric_limits<float>::signaling_NaN(), bitsf(0x7f800001u), bitsf(0xff800001u)}) {
    uint16_t h = ring::float_to_half(nan);
    CHECK_EQ(h & 0x7c00, 0x7c00);
    CHECK((h & 0x03ff) != 0);
    CHECK_EQ(h & 0x0200, 0x0200);  // quiet
    CHECK_EQ(h >> 15, static_cast<int>(fbits(nan) >> 31));
  }
}

TEST(float_to_half_sampled_against_definition) {
  // Every 1009th float bit pattern (about 4 million), against the definition
  // (and against the compiler's _Float16 conversion when it has one).
  for (uint64_t u = 0; u < 0x100000000ull; u += 1009) {
    float f = bitsf(static_cast<uint32_t>(u));
    if (std::isnan(f)) continue;
    uint16_t h = ring::float_to_half(f);
#ifdef __FLT16_MAX__
    _Float16 c = static_cast<_Float16>(f);
    uint16_t hc;
    std::memcpy(&hc, &c, 2);
    if (h != hc) CHECK_EQ(h, hc);
#endif
    double a = std::fabs(static_cast<double>(f));
    uint32_t expect;
    if (a >= 65520.0) {
      expect = 0x7c00;
    } else {
      uint32_t k = 0, step = 0x4000;  // binary search: largest k with value(k) <= a
      while (step) {
        if (k + step < 0x7c00u && half_reference(k + step) <= a) k += step;
        step >>= 1;
      }
      expect = half_reference(k) == a ? k : nearest_even(a, k, half_rounding_value);
    }
    expect |= (u >> 16) & 0x8000u;
    if (h != expect) CHECK_EQ(h, expect);
  }
}

TEST(bfloat16_conversions) {
  for (uint32_t b = 0; b < 65536; ++b) {
    float f = ring::bfloat16_to_float(static_cast<uint16_t>(b));
    CHECK_EQ(fbits(f), b << 16);
    if (!std::isnan(f)) CHECK_EQ(ring::float_to_bfloat16(f), b);
  }
  // Inf stands for 2^128 when rounding, as IEEE specifies.
  auto bvalue = [](uint32_t k) { return k == 0x7f80u ? std::ldexp(1.0, 128) : static_cast<double>(bitsf(k << 16)); };
  for (uint64_t u = 0; u < 0x80000000ull; u += 97) {  // positive, then mirrored
    float f = bitsf(static_cast<uint32_t>(u));
    if (std::isnan(f) || std::isinf(f)) continue;
    uint32_t k = static_cast<uint32_t>(u >> 16);
    uint32_t expect = bvalue(k) == f ? k : nearest_even(f, k, bvalue);
    uint16_t got = ring::float_to_bfloat16(f);
    if (got != expect) CHECK_EQ(got, expect);
    if (ring::float_to_bfloat16(-f) != (expect | 0x8000u)) CHECK_EQ(ring::float_to_bfloat16(-f), expect | 0x8000u);
  }
  CHECK_EQ(ring::float_to_bfloat16(std::numeric_limits<float>::max()), 0x7f80);  // rounds up to Inf
  CHECK_EQ(ring::float_to_bfloat16(INFINITY), 0x7f80);
  CHECK_EQ(ring::float_to_bfloat16(-INFINITY), 0xff80);
  CHECK_EQ(ring::float_to_bfloat16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);  // tie -> even (1.0)
  CHECK_EQ(ring::float_to_bfloat16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);  // tie -> even
  CHECK_EQ(ring::float_to_bfloat16(std::numeric_limits<float>::denorm_min()), 0x0000);
  CHECK_EQ(ring::float_to_bfloat16(bitsf(0x00018000u)), 0x0002);  // subnormal tie -> even
  for (uint32_t nan : {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u, 0x7fffffffu}) {
    uint16_t b = ring::float_to_bfloat16(bitsf(nan));
    CHECK(std::isnan(ring::bfloat16_to_float(b)));
    CHECK_EQ(b & 0x0040, 0x0040);
    CHECK_EQ(b >> 15, static_cast<int>(nan >> 31));
  }
}

// ---- reduce_into -------------------------------------------------------------

namespace {

template <class T>
T ref_int(T a, T b, ReduceOp op) {
  using U = std::make_unsigned_t<T>;
  const uint64_t ua = static_cast<uint64_t>(static_cast<U>(a)), ub = static_cast<uint64_t>(static_cast<U>(b));
  switch (op) {
    case ReduceOp::Sum: case ReduceOp::Average: return static_cast<T>(static_cast<U>(ua + ub));
    case ReduceOp::Product: return static_cast<T>(static_cast<U>(ua * ub));
    case ReduceOp::Min: return std::min(a, b);
    case ReduceOp::Max: return std::max(a, b);
  }
  return 0;
}

template <class T>
T ref_float(T a, T b, ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: case ReduceOp::Average: return a + b;
    case ReduceOp::Product: return a * b;
    case ReduceOp::Min: return std::isnan(a) ? a : std::isnan(b) ? b : std::min(a, b);
    case ReduceOp::Max: return std::isnan(a) ? a : std::isnan(b) ? b : std::max(a, b);
  }
  return 0;
}

template <float (*To)(uint16_t), uint16_t (*From)(float)>
uint16_t ref_half(uint16_t a, uint16_t b, ReduceOp op) {
  float fa = To(a), fb = To(b);
  switch (op) {
    case ReduceOp::Sum: case ReduceOp::Average: return From(fa + fb);
    case ReduceOp::Product: return From(fa * fb);
    case ReduceOp::Min: return std::isnan(fa) ? a : std::isnan(fb) ? b : (fb < fa ? b : a);
    case ReduceOp::Max: return std::isnan(fa) ? a : std::isnan(fb) ? b : (fb > fa ? b : a);
  }
  return 0;
}

uint8_t ref_bool(uint8_t a, uint8_t b, ReduceOp op) {
  bool x = a != 0, y = b != 0;
  return (op == ReduceOp::Min || op == ReduceOp::Product) ? (x && y) : (x || y);
}

// Random bytes with a sprinkling of special values (extremes, NaN, Inf, 0, -0,
// subnormals) for the type.
template <class T>
std::vector<T> sample(size_t n, std::mt19937& rng, const std::vector<T>& specials) {
  std::vector<T> v(n);
  for (size_t i = 0; i < n; ++i) {
    if (!specials.empty() && rng() % 4 == 0) {
      v[i] = specials[rng() % specials.size()];
    } else {
      uint64_t bits = (static_cast<uint64_t>(rng()) << 32) | rng();
      std::memcpy(&v[i], &bits, sizeof(T));
      if (std::is_floating_point<T>::value && rng() % 2) v[i] = static_cast<T>(static_cast<int>(rng() % 200) - 100) / 8;
    }
  }
  return v;
}

// Equal bits, or both NaN (which NaN payload an operation returns is up to
// the CPU and the operand order the compiler picks).
template <class T>
bool same_bits(T a, T b, DataType dtype) {
  if constexpr (std::is_floating_point<T>::value)
    if (std::isnan(a) && std::isnan(b)) return true;
  if constexpr (std::is_same<T, uint16_t>::value) {
    if (dtype == DataType::Float16 && std::isnan(ring::half_to_float(a)) && std::isnan(ring::half_to_float(b)))
      return true;
    if (dtype == DataType::BFloat16 && std::isnan(ring::bfloat16_to_float(a)) &&
        std::isnan(ring::bfloat16_to_float(b)))
      return true;
  }
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

// Runs reduce_into on aligned, misaligned and aliased buffers and compares
// every element with ref(a, b, op).
template <class T, class Ref>
void check_kernel(DataType dtype, const std::vector<T>& specials, Ref ref) {
  std::mt19937 rng(static_cast<unsigned>(dtype) * 7919u);
  for (size_t n : {0u, 1u, 3u, 17u, 1000u, 5003u}) {
    std::vector<T> a = sample<T>(n, rng, specials), b = sample<T>(n, rng, specials);
    for (ReduceOp op : kOps) {
      std::vector<T> d = a;
      ring::reduce_into(d.data(), b.data(), n, dtype, op);
      int bad = 0;
      for (size_t i = 0; i < n && bad < 3; ++i) {
        T want = ref(a[i], b[i], op);
        if (!same_bits(d[i], want, dtype)) {
          ++bad;
          ring_test::record_failure(__FILE__, __LINE__,
                                    std::string(ring::dtype_name(dtype)) + " " + ring::reduce_op_name(op) +
                                        " element " + std::to_string(i) + " wrong");
        }
      }
      // Misaligned source and destination (one byte off) give the same bytes.
      std::vector<uint8_t> ds(n * sizeof(T) + 1), ss(n * sizeof(T) + 1);
      if (n) std::memcpy(ds.data() + 1, a.data(), n * sizeof(T));
      if (n) std::memcpy(ss.data() + 1, b.data(), n * sizeof(T));
      ring::reduce_into(ds.data() + 1, ss.data() + 1, n, dtype, op);
      CHECK(n == 0 || std::memcmp(ds.data() + 1, d.data(), n * sizeof(T)) == 0);
      // Misaligned source only (the transport case): read with unaligned loads.
      std::vector<T> d2 = a;
      ring::reduce_into(d2.data(), ss.data() + 1, n, dtype, op);
      CHECK(n == 0 || std::memcmp(d2.data(), d.data(), n * sizeof(T)) == 0);
      // dst == src: d = d (op) d.
      std::vector<T> self = a;
      ring::reduce_into(self.data(), self.data(), n, dtype, op);
      for (size_t i = 0; i < n; ++i)
        if (!same_bits(self[i], ref(a[i], a[i], op), dtype)) {
          CHECK(!"aliased reduce wrong");
          break;
        }
    }
  }
}

template <class T>
std::vector<T> int_specials() {
  using L = std::numeric_limits<T>;
  return {L::min(), L::max(), T(0), T(1), T(-1), T(2), static_cast<T>(L::max() / 2 + 1)};
}

template <class T>
std::vector<T> float_specials() {
  using L = std::numeric_limits<T>;
  return {T(0), -T(0), T(1), T(-1), L::infinity(), -L::infinity(), L::quiet_NaN(), -L::quiet_NaN(),
          L::denorm_min(), -L::denorm_min(), L::max(), L::lowest(), L::min()};
}

const std::vector<uint16_t> kHalfSpecials = {0x0000, 0x8000, 0x3c00, 0xbc00, 0x7c00, 0xfc00, 0x7e00, 0xfe00,
                                             0x7c01, 0x0001, 0x8001, 0x03ff, 0x0400, 0x7bff, 0xfbff, 0x3c01};
const std::vector<uint16_t> kBf16Specials = {0x0000, 0x8000, 0x3f80, 0xbf80, 0x7f80, 0xff80, 0x7fc0, 0xffc0,
                                             0x7f81, 0x0001, 0x8001, 0x007f, 0x0080, 0x7f7f, 0xff7f, 0x3f81};

}  // namespace

TEST(reduce_integers_every_op) {
  check_kernel<uint8_t>(DataType::UInt8, int_specials<uint8_t>(), ref_int<uint8_t>);
  check_kernel<int8_t>(DataType::Int8, int_specials<int8_t>(), ref_int<int8_t>);
  check_kernel<int16_t>(DataType::Int16, int_specials<int16_t>(), ref_int<int16_t>);
  check_kernel<int32_t>(DataType::Int32, int_specials<int32_t>(), ref_int<int32_t>);
  check_kernel<int64_t>(DataType::Int64, int_specials<int64_t>(), ref_int<int64_t>);
}

TEST(reduce_integer_wrap_examples) {
  int8_t i8[2] = {127, -128}, j8[2] = {1, -1};
  ring::reduce_into(i8, j8, 2, DataType::Int8, ReduceOp::Sum);
  CHECK_EQ(i8[0], -128);
  CHECK_EQ(i8[1], 127);
  uint8_t u8 = 200, v8 = 100;
  ring::reduce_into(&u8, &v8, 1, DataType::UInt8, ReduceOp::Sum);
  CHECK_EQ(u8, 44);
  int16_t i16 = -32768, j16 = -1;
  ring::reduce_into(&i16, &j16, 1, DataType::Int16, ReduceOp::Product);
  CHECK_EQ(i16, -32768);
  int32_t i32 = 65536, j32 = 65536;
  ring::reduce_into(&i32, &j32, 1, DataType::Int32, ReduceOp::Product);
  CHECK_EQ(i32, 0);
  int64_t i64 = std::numeric_limits<int64_t>::max(), j64 = 1;
  ring::reduce_into(&i64, &j64, 1, DataType::Int64, ReduceOp::Average);
  CHECK_EQ(i64, std::numeric_limits<int64_t>::min());
}

TEST(reduce_floats_every_op) {
  check_kernel<float>(DataType::Float32, float_specials<float>(), ref_float<float>);
  check_kernel<double>(DataType::Float64, float_specials<double>(), ref_float<double>);
}

TEST(reduce_half_bfloat16_every_op) {
  check_kernel<uint16_t>(DataType::Float16, kHalfSpecials, ref_half<ring::half_to_float, ring::float_to_half>);
  ring::set_f16_hardware_enabled(false);  // the software path too, where F16C exists
  check_kernel<uint16_t>(DataType::Float16, kHalfSpecials, ref_half<ring::half_to_float, ring::float_to_half>);
  ring::set_f16_hardware_enabled(true);
  check_kernel<uint16_t>(DataType::BFloat16, kBf16Specials,
                         ref_half<ring::bfloat16_to_float, ring::float_to_bfloat16>);
  // Rounding after every operation: 1 + 2^-11 is a tie in float16 -> 1.
  uint16_t a = 0x3c00, b = ring::float_to_half(std::ldexp(1.0f, -11));
  ring::reduce_into(&a, &b, 1, DataType::Float16, ReduceOp::Sum);
  CHECK_EQ(a, 0x3c00);
  uint16_t big = 0x7bff, sixteen = ring::float_to_half(16.0f);  // 65504 + 16 = 65520 -> Inf
  ring::reduce_into(&big, &sixteen, 1, DataType::Float16, ReduceOp::Sum);
  CHECK_EQ(big, 0x7c00);
  uint16_t nan = 0x7e00, one = 0x3c00;
  ring::reduce_into(&one, &nan, 1, DataType::Float16, ReduceOp::Max);
  CHECK(std::isnan(ring::half_to_float(one)));
}

TEST(reduce_bool_every_op) {
  check_kernel<uint8_t>(DataType::Bool, {0, 1, 2, 255}, ref_bool);
  uint8_t d[4] = {0, 0, 1, 2}, s[4] = {0, 3, 0, 1};
  uint8_t d2[4];
  std::memcpy(d2, d, 4);
  ring::reduce_into(d, s, 4, DataType::Bool, ReduceOp::Sum);
  CHECK(d[0] == 0 && d[1] == 1 && d[2] == 1 && d[3] == 1);
  ring::reduce_into(d2, s, 4, DataType::Bool, ReduceOp::Product);
  CHECK(d2[0] == 0 && d2[1] == 0 && d2[2] == 0 && d2[3] == 1);
}

TEST(reduce_rejects_bad_enums) {
  float x = 1, y = 2;
  CHECK_THROWS_KIND(ring::reduce_into(&x, &y, 1, static_cast<DataType>(42), ReduceOp::Sum), ring::ErrorKind::BadArgument);
  CHECK_THROWS_KIND(ring::reduce_into(&x, &y, 1, DataType::Float32, static_cast<ReduceOp>(9)), ring::ErrorKind::BadArgument);
}

// ---- scale_buffer ----------------------------------------------------------

TEST(scale_floats_in_own_precision) {
  std::vector<float> f = {1.0f, -3.0f, 0.1f, INFINITY, 1e-40f};
  std::vector<float> fw = f;
  ring::scale_buffer(f.data(), f.size(), DataType::Float32, 1.0 / 3.0);
  for (size_t i = 0; i < f.size(); ++i) CHECK_EQ(fbits(f[i]), fbits(fw[i] * static_cast<float>(1.0 / 3.0)));
  double d[3] = {1.0, -3.0, 0.1};
  ring::scale_buffer(d, 3, DataType::Float64, 0.25);
  CHECK(d[0] == 0.25 && d[1] == -0.75 && d[2] == 0.1 * 0.25);
  for (DataType t : {DataType::Float16, DataType::BFloat16}) {
    bool half = t == DataType::Float16;
    auto to = half ? ring::half_to_float : ring::bfloat16_to_float;
    auto from = half ? ring::float_to_half : ring::float_to_bfloat16;
    std::vector<uint16_t> h(512), hw;
    for (size_t i = 0; i < h.size(); ++i) h[i] = static_cast<uint16_t>(i * 127 + 3);
    hw = h;
    ring::scale_buffer(h.data(), h.size(), t, 0.3);
    for (size_t i = 0; i < h.size(); ++i) {
      uint16_t want = from(to(hw[i]) * 0.3f);
      if (std::isnan(to(want))) CHECK(std::isnan(to(h[i])));
      else CHECK_EQ(h[i], want);
    }
  }
}

TEST(scale_integers_truncate_toward_zero) {
  int32_t i[4] = {7, -7, 1000000, -1};
  ring::scale_buffer(i, 4, DataType::Int32, 0.5);
  CHECK(i[0] == 3 && i[1] == -3 && i[2] == 500000 && i[3] == 0);
  uint8_t u[3] = {255, 1, 3};
  ring::scale_buffer(u, 3, DataType::UInt8, 1.0 / 3.0);
  const double third = 1.0 / 3.0;
  CHECK_EQ(static_cast<int>(u[0]), static_cast<int>(std::trunc(255 * third)));
  CHECK_EQ(static_cast<int>(u[1]), 0);
  CHECK_EQ(static_cast<int>(u[2]), static_cast<int>(std::trunc(3 * third)));
  int8_t s8[2] = {100, -100};
  ring::scale_buffer(s8, 2, DataType::Int8, 2.0);  // saturates instead of undefined behaviour
  CHECK(s8[0] == 127 && s8[1] == -128);
  int64_t big[2] = {int64_t(1) << 52, -(int64_t(1) << 52)};
  ring::scale_buffer(big, 2, DataType::Int64, 0.25);
  CHECK(big[0] == (int64_t(1) << 50) && big[1] == -(int64_t(1) << 50));
  int16_t s16[3] = {9, -9, 5};
  ring::scale_buffer(s16, 3, DataType::Int16, 1.0 / 4.0);
  CHECK(s16[0] == 2 && s16[1] == -2 && s16[2] == 1);
  std::vector<uint8_t> raw(9);  // misaligned int32
  int32_t v = -9;
  std::memcpy(raw.data() + 1, &v, 4);
  ring::scale_buffer(raw.data() + 1, 1, DataType::Int32, 0.5);
  std::memcpy(&v, raw.data() + 1, 4);
  CHECK_EQ(v, -4);
}

TEST(scale_rejects_bool) {
  uint8_t b[2] = {1, 0};
  CHECK_THROWS_KIND(ring::scale_buffer(b, 2, DataType::Bool, 0.5), ring::ErrorKind::BadArgument);
  CHECK_THROWS_KIND(ring::scale_buffer(b, 2, static_cast<DataType>(77), 0.5), ring::ErrorKind::BadArgument);
}

TEST(reduce_f16_hardware_matches_software) {
  // Every float16 value against a set of partners, through the F16C path (when
  // the CPU has one) and the software path: same bits unless the result is NaN.
  std::vector<uint16_t> a(65536);
  for (uint32_t i = 0; i < 65536; ++i) a[i] = static_cast<uint16_t>(i);
  for (uint16_t partner : kHalfSpecials) {
    std::vector<uint16_t> b(65536, partner);
    for (ReduceOp op : kOps) {
      std::vector<uint16_t> hw = a, sw = a;
      ring::reduce_into(hw.data(), b.data(), hw.size(), DataType::Float16, op);
      ring::set_f16_hardware_enabled(false);
      ring::reduce_into(sw.data(), b.data(), sw.size(), DataType::Float16, op);
      ring::set_f16_hardware_enabled(true);
      for (size_t i = 0; i < a.size(); ++i)
        if (!same_bits(hw[i], sw[i], DataType::Float16)) {
          CHECK_EQ(hw[i], sw[i]);
          break;
        }
    }
  }
}
