// The Adasum allreduce (collectives/adasum.cc) on N ranks as threads,
// checked against the tree of pairwise combinations computed here in
// double; fused tensors against each tensor reduced alone (bitwise), and
// the errors for unsupported world sizes and dtypes.
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "collectives/collectives.h"
#include "common/error.h"
#include "reduce/reduce.h"
#include "tests/fixture.h"
#include "tests/harness.h"

using ring::DataType;
using ring::Mesh;

namespace {

using Vec = std::vector<double>;

// (1 - a.b/(2|a|^2)) a + (1 - a.b/(2|b|^2)) b; coefficient 1 for a zero side.
Vec combine(const Vec& a, const Vec& b) {
  double dot = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    dot += a[i] * b[i];
    aa += a[i] * a[i];
    bb += b[i] * b[i];
  }
  const double ca = aa == 0 ? 1 : 1 - dot / (2 * aa), cb = bb == 0 ? 1 : 1 - dot / (2 * bb);
  Vec out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = ca * a[i] + cb * b[i];
  return out;
}

// The adaptive sum of ranks [lo, hi): first half with second half, recursively.
Vec reference(const std::vector<Vec>& per_rank, int lo, int hi) {
  if (hi - lo == 1) return per_rank[lo];
  const int mid = lo + (hi - lo) / 2;
  return combine(reference(per_rank, lo, mid), reference(per_rank, mid, hi));
}

// Tensor t of rank r: a shared part plus the rank's own, scaled per tensor.
Vec input(int r, size_t t, size_t count) {
  std::mt19937_64 shared(1000 + t), own(77 * r + t);
  std::normal_distribution<double> normal;
  const double scale = std::pow(10.0, static_cast<double>(t % 4) - 2);
  Vec v(count);
  for (auto& x : v) x = scale * (normal(shared) + 0.5 * normal(own));
  return v;
}

const std::vector<size_t> kCounts = {7, 1, 0, 33, 1000, 2};

}  // namespace

TEST(adasum_matches_reference_per_tensor) {
  for (int n : {1, 2, 4, 8}) {
    std::vector<std::vector<Vec>> in(kCounts.size(), std::vector<Vec>(n));
    for (size_t t = 0; t < kCounts.size(); ++t)
      for (int r = 0; r < n; ++r) in[t][r] = input(r, t, kCounts[t]);
    std::vector<std::vector<Vec>> fused(n), alone(n);
    ring_test::run_ranks(n, [&](Mesh& m) {
      std::vector<Vec> bufs;
      std::vector<void*> ptrs;
      for (size_t t = 0; t < kCounts.size(); ++t) bufs.push_back(in[t][m.rank()]);
      for (auto& b : bufs) ptrs.push_back(b.data());
      ring::adasum_allreduce(m, ptrs, kCounts, DataType::Float64);
      fused[m.rank()] = bufs;
      for (size_t t = 0; t < kCounts.size(); ++t) {
        Vec one = in[t][m.rank()];
        ring::adasum_allreduce(m, {one.data()}, {kCounts[t]}, DataType::Float64);
        alone[m.rank()].push_back(one);
      }
    });
    for (size_t t = 0; t < kCounts.size(); ++t) {
      const Vec want = reference(in[t], 0, n);
      for (size_t i = 0; i < want.size(); ++i)
        CHECK(std::fabs(fused[0][t][i] - want[i]) <= 1e-12 * (1 + std::fabs(want[i])));
      for (int r = 0; r < n; ++r) {
        CHECK(fused[r][t] == fused[0][t]);  // every rank the same bits
        CHECK(alone[r][t] == fused[0][t]);  // fusion does not change a tensor's result
      }
    }
  }
}

TEST(adasum_float32_and_float16) {
  const size_t count = 101;
  for (DataType dt : {DataType::Float32, DataType::Float16, DataType::BFloat16}) {
    const int n = 4;
    std::vector<Vec> in(n);
    for (int r = 0; r < n; ++r) in[r] = input(r, 2, count);
    const Vec want = reference(in, 0, n);
    const double tol = dt == DataType::Float32 ? 1e-5 : dt == DataType::Float16 ? 1e-2 : 5e-2;
    ring_test::run_ranks(n, [&](Mesh& m) {
      std::vector<uint8_t> buf(count * ring::dtype_size(dt));
      for (size_t i = 0; i < count; ++i) {
        const float f = static_cast<float>(in[m.rank()][i]);
        if (dt == DataType::Float32) std::memcpy(&buf[4 * i], &f, 4);
        else {
          uint16_t h = dt == DataType::Float16 ? ring::float_to_half(f) : ring::float_to_bfloat16(f);
          std::memcpy(&buf[2 * i], &h, 2);
        }
      }
      ring::adasum_allreduce(m, {buf.data()}, {count}, dt);
      for (size_t i = 0; i < count; ++i) {
        float f;
        uint16_t h;
        if (dt == DataType::Float32) std::memcpy(&f, &buf[4 * i], 4);
        else {
          std::memcpy(&h, &buf[2 * i], 2);
          f = dt == DataType::Float16 ? ring::half_to_float(h) : ring::bfloat16_to_float(h);
        }
        CHECK(std::fabs(f - want[i]) <= tol * 2);
      }
    });
  }
}

TEST(adasum_zero_side_passes_the_other_through) {
  ring_test::run_ranks(2, [](Mesh& m) {
    Vec v = m.rank() == 0 ? Vec{1, -2, 3} : Vec{0, 0, 0};
    ring::adasum_allreduce(m, {v.data()}, {3}, DataType::Float64);
    CHECK(v == (Vec{1, -2, 3}));
    Vec z(3, 0.0);
    ring::adasum_allreduce(m, {z.data()}, {3}, DataType::Float64);
    CHECK(z == Vec(3, 0.0));
  });
}

TEST(adasum_rejects_unsupported_sizes_and_dtypes) {
  ring_test::run_ranks(3, [](Mesh& m) {
    double x[2] = {1, 2};
    CHECK_THROWS_KIND(ring::adasum_allreduce(m, {x}, {2}, DataType::Float64), ring::ErrorKind::BadArgument);
  });
  ring_test::run_ranks(2, [](Mesh& m) {
    int32_t x[2] = {1, 2};
    CHECK_THROWS_KIND(ring::adasum_allreduce(m, {x}, {2}, DataType::Int32), ring::ErrorKind::BadArgument);
  });
}
