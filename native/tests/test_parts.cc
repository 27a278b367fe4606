// Buffers in parts (collectives/parts.h): the view itself, and collectives
// on parted buffers (gather sends, scattered reductions) giving bitwise the
// results of the same collective on one contiguous buffer.
#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "collectives/collectives.h"
#include "collectives/parts.h"
#include "collectives/slices.h"
#include "tests/fixture.h"
#include "tests/harness.h"
#include "tests/scattered.h"

using ring::DataType;
using ring::Mesh;
using ring::Parts;
using ring::ReduceOp;
using ring_test::Scattered;
using ring_test::Wire;

namespace {

// Allreduce of `count` floats on n ranks over w, contiguous and in parts
// (out of place and in place): the results must be bitwise equal.
void check_parted_allreduce(Wire w, int n, size_t count, double post) {
  const std::vector<size_t> chunks = ring::slice_counts(count, n);
  auto meshes = ring_test::make_meshes(w, n);
  ring_test::run_ranks(meshes, [&](Mesh& m) {
    const std::vector<float> input = ring_test::random_floats(m.rank(), count, 5);
    std::vector<float> whole(count);
    ring::ring_allreduce(m, input.data(), whole.data(), chunks, DataType::Float32, ReduceOp::Sum, post);
    for (bool in_place : {false, true}) {
      Scattered s(input, 11 + static_cast<unsigned>(count), in_place);
      ring::ring_allreduce(m, s.parts, chunks, DataType::Float32, ReduceOp::Sum, post);
      const std::vector<float> got = s.result();
      if (got.size() != count || std::memcmp(got.data(), whole.data(), count * sizeof(float)) != 0)
        ring_test::record_failure(__FILE__, __LINE__,
                                  std::string("parted allreduce differs: ") + ring_test::wire_name(w) +
                                      " n=" + std::to_string(n) + " count=" + std::to_string(count) +
                                      (in_place ? " in place" : ""));
    }
  });
}

}  // namespace

TEST(parts_merge_visit_and_pieces) {
  uint8_t a[16], b[16], c[16];
  Parts p;
  p.add(a, b, 4);
  p.add(a + 4, b + 4, 4);  // continues both sides: merged
  p.add(c, c, 0);          // empty: skipped
  p.add(c, c, 8);
  CHECK_EQ(p.count(), size_t(2));
  CHECK_EQ(p.bytes(), size_t(16));
  std::vector<size_t> seen;
  p.visit(6, 5, [&](const uint8_t* in, uint8_t* out, size_t at, size_t n) {
    seen.insert(seen.end(), {static_cast<size_t>(in - a), static_cast<size_t>(out - b), at, n});
  });
  CHECK(seen.size() == 8);
  CHECK(seen[0] == 6 && seen[1] == 6 && seen[2] == 0 && seen[3] == 2);  // the last 2 bytes of part 0
  const std::vector<ring::Piece> outs = p.pieces(6, 5, true);
  CHECK(outs.size() == 2 && outs[0].data == b + 6 && outs[0].len == 2 && outs[1].data == c && outs[1].len == 3);
  const Parts r = p.output_range(6, 5);
  CHECK_EQ(r.bytes(), size_t(5));
  r.visit(0, 5, [&](const uint8_t* in, uint8_t* out, size_t, size_t) { CHECK(in == out); });
}

TEST(parted_allreduce_matches_contiguous) {
  for (int n : {2, 3, 5}) check_parted_allreduce(Wire::Inproc, n, 30011, 1.0);
  check_parted_allreduce(Wire::Inproc, 3, 1001, 0.25);
  // Two ranks from 1 MiB up take the block-wise pair algorithm.
  check_parted_allreduce(Wire::Inproc, 2, (1 << 18) + 13, 0.5);
}

TEST(parted_allreduce_over_shm_and_tcp) {
  // Gather sends through each channel's try_write_pieces.
  for (Wire w : {Wire::Shm, Wire::Tcp}) {
    check_parted_allreduce(w, 3, 30011, 1.0);
    check_parted_allreduce(w, 2, (1 << 19) + 3, 1.0);
  }
}

TEST(parted_hierarchical_allreduce_matches_contiguous) {
  const int hosts = 2, per_host = 2, n = hosts * per_host;
  const size_t count = 20011;
  auto meshes = ring_test::make_inproc_meshes(n);
  ring_test::run_ranks(meshes, [&](Mesh& m) {
    auto [lm, cm] = ring_test::host_meshes(m, hosts, per_host);
    const std::vector<size_t> chunks = ring::slice_counts(count, per_host);
    const std::vector<float> input = ring_test::random_floats(m.rank(), count, 9);
    std::vector<float> whole(count);
    ring::hierarchical_allreduce(*lm, *cm, Parts(input.data(), whole.data(), count * sizeof(float)), chunks,
                                 DataType::Float32, ReduceOp::Sum, 1.0);
    Scattered s(input, 3, false);
    ring::hierarchical_allreduce(*lm, *cm, s.parts, chunks, DataType::Float32, ReduceOp::Sum, 1.0);
    const std::vector<float> got = s.result();
    CHECK(std::memcmp(got.data(), whole.data(), count * sizeof(float)) == 0);
  });
}
