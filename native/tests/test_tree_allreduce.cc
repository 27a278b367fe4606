// The tree allreduces (collectives/tree_order.h): recursive doubling and
// recursive halving-doubling reduce every element in the binary tree's
// order, so they agree bit for bit with each other and with a reference
// built in that order; with two ranks, recursive doubling agrees with the
// ring.
#include <cstring>
#include <vector>

#include "collectives/allreduce_choice.h"
#include "collectives/collectives.h"
#include "collectives/slices.h"
#include "common/error.h"
#include "reduce/reduce.h"
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

// Inputs with many +0/-0 ties (Min and Max then depend on operand order)
// and otherwise random values (Sum depends on the order of additions).
std::vector<float> tricky_floats(int rank, size_t count) {
  std::vector<float> v = ring_test::random_floats(rank, count, 23);
  for (size_t i = 0; i < count; i += 3) v[i] = ((i / 3 + static_cast<size_t>(rank)) % 2) ? -0.0f : 0.0f;
  return v;
}

// The reduction of every rank's input in the binary tree's order.
std::vector<float> tree_reference(int n, size_t count, ReduceOp op) {
  std::vector<std::vector<float>> level;
  for (int r = 0; r < n; ++r) level.push_back(tricky_floats(r, count));
  while (level.size() > 1) {
    std::vector<std::vector<float>> next;
    for (size_t i = 0; i < level.size(); i += 2) {
      next.push_back(level[i]);
      ring::reduce_into(next.back().data(), level[i + 1].data(), count, DataType::Float32, op);
    }
    level.swap(next);
  }
  return level[0];
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Both tree allreduces of `count` floats on n ranks over w, in parts, out
// of place and in place, against the tree-order reference.
void check_tree(Wire w, int n, size_t count, ReduceOp op) {
  const std::vector<float> expected = tree_reference(n, count, op);
  const std::vector<size_t> chunks = ring::slice_counts(count, n);
  auto meshes = ring_test::make_meshes(w, n);
  ring_test::run_ranks(meshes, [&](Mesh& m) {
    const std::vector<float> input = tricky_floats(m.rank(), count);
    for (bool in_place : {false, true}) {
      Scattered a(input, 7, in_place), b(input, 8, in_place);
      ring::doubling_allreduce(m, a.parts, chunks, DataType::Float32, op, 1.0);
      ring::halving_doubling_allreduce(m, b.parts, DataType::Float32, op, 1.0);
      if (!same_bits(a.result(), expected) || !same_bits(b.result(), expected))
        ring_test::record_failure(__FILE__, __LINE__,
                                  std::string("tree allreduce differs from the tree order: ") +
                                      ring_test::wire_name(w) + " n=" + std::to_string(n) +
                                      " count=" + std::to_string(count) + " op=" + ring::reduce_op_name(op));
    }
  });
}

}  // namespace

TEST(tree_allreduces_follow_the_tree_order) {
  for (int n : {4, 8})
    for (size_t count : {size_t(0), size_t(1), size_t(3), size_t(1001), size_t(30011)})
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Min, ReduceOp::Max}) check_tree(Wire::Inproc, n, count, op);
}

TEST(tree_allreduces_over_shm_and_tcp) {
  for (Wire w : {Wire::Shm, Wire::Tcp}) check_tree(w, 4, 20011, ReduceOp::Sum);
}

TEST(doubling_allreduce_of_two_ranks_matches_the_ring) {
  for (size_t count : {size_t(1), size_t(7), size_t(4097)})
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Min, ReduceOp::Max}) {
      const std::vector<size_t> chunks = ring::slice_counts(count, 2);
      ring_test::run_ranks(2, [&](Mesh& m) {
        const std::vector<float> input = tricky_floats(m.rank(), count);
        std::vector<float> ring_result(count);
        ring::ring_allreduce(m, input.data(), ring_result.data(), chunks, DataType::Float32, op, 0.5);
        Scattered s(input, 5, false);
        ring::doubling_allreduce(m, s.parts, chunks, DataType::Float32, op, 0.5);
        CHECK(same_bits(s.result(), ring_result));
      });
    }
}

TEST(tree_allreduces_scale_and_reject_other_world_sizes) {
  ring_test::run_ranks(4, [](Mesh& m) {
    std::vector<float> x(10, 2.0f), y(10, 2.0f);
    ring::doubling_allreduce(m, Parts(x.data(), x.data(), 40), ring::slice_counts(10, 4), DataType::Float32,
                             ReduceOp::Sum, 0.25);
    ring::halving_doubling_allreduce(m, Parts(y.data(), y.data(), 40), DataType::Float32, ReduceOp::Sum, 0.25);
    for (int i = 0; i < 10; ++i) CHECK(x[i] == 2.0f && y[i] == 2.0f);
  });
  ring_test::run_ranks(3, [](Mesh& m) {
    float x[3] = {1, 2, 3};
    CHECK_THROWS_KIND(ring::doubling_allreduce(m, Parts(x, x, 12), {1, 1, 1}, DataType::Float32, ReduceOp::Sum, 1.0),
                      ring::ErrorKind::BadArgument);
    CHECK_THROWS_KIND(ring::halving_doubling_allreduce(m, Parts(x, x, 12), DataType::Float32, ReduceOp::Sum, 1.0),
                      ring::ErrorKind::BadArgument);
  });
}

TEST(allreduce_choice_keeps_each_job_in_one_order) {
  using ring::AllreduceAlgorithm;
  using ring::AllreduceMode;
  using ring::choose_allreduce;
  const auto Auto = AllreduceMode::Auto;
  // Two ranks: the batch's size picks, every algorithm has the ring's order.
  CHECK(choose_allreduce(Auto, 2, true, 4) == AllreduceAlgorithm::Doubling);
  CHECK(choose_allreduce(Auto, 2, false, 8 << 20) == AllreduceAlgorithm::Ring);
  // One host, or a world that is not a power of two: the ring.
  CHECK(choose_allreduce(Auto, 8, true, 4) == AllreduceAlgorithm::Ring);
  CHECK(choose_allreduce(Auto, 6, false, 4) == AllreduceAlgorithm::Ring);
  CHECK(choose_allreduce(AllreduceMode::Tree, 6, false, 4) == AllreduceAlgorithm::Ring);
  // Several hosts: the tree order at every size, by the batch's size.
  CHECK(choose_allreduce(Auto, 8, false, 4) == AllreduceAlgorithm::Doubling);
  CHECK(choose_allreduce(Auto, 8, false, 64 << 20) == AllreduceAlgorithm::HalvingDoubling);
  CHECK(choose_allreduce(AllreduceMode::Ring, 8, false, 4) == AllreduceAlgorithm::Ring);
  CHECK(choose_allreduce(AllreduceMode::Tree, 8, true, 4) == AllreduceAlgorithm::Doubling);
  CHECK(choose_allreduce(AllreduceMode::Doubling, 8, true, 1 << 30) == AllreduceAlgorithm::Doubling);
  CHECK(choose_allreduce(AllreduceMode::HalvingDoubling, 8, true, 4) == AllreduceAlgorithm::HalvingDoubling);
  // The job's order, which the fast path follows (engine/fast_path.h): the
  // ring's unless the tree's is chosen at every size.
  CHECK(ring::ring_order(Auto, 2, false) && ring::ring_order(AllreduceMode::Tree, 2, false));
  CHECK(ring::ring_order(Auto, 8, true) && ring::ring_order(Auto, 6, false));
  CHECK(ring::ring_order(AllreduceMode::Ring, 8, false));
  CHECK(!ring::ring_order(Auto, 8, false) && !ring::ring_order(AllreduceMode::Tree, 4, true));
}
