#include "collectives/allreduce_choice.h"

#include "collectives/collectives.h"
#include "collectives/tree_order.h"

namespace ring {
namespace {

// Below these batch sizes recursive doubling beats the algorithm the batch
// would take otherwise (measured: docs/scaling.md).
constexpr size_t kDoublingMaxBytesTwoRanks = 16 << 10;
constexpr size_t kDoublingMaxBytes = 64 << 10;

}  // namespace

AllreduceAlgorithm choose_allreduce(AllreduceMode mode, int n, bool one_host, size_t batch_bytes) {
  using A = AllreduceAlgorithm;
  if (mode == AllreduceMode::Ring || !is_power_of_two(n) || n < 2) return A::Ring;
  if (mode == AllreduceMode::Doubling) return A::Doubling;
  if (n == 2) return mode != AllreduceMode::Auto || batch_bytes < kDoublingMaxBytesTwoRanks ? A::Doubling : A::Ring;
  if (mode == AllreduceMode::HalvingDoubling) return A::HalvingDoubling;
  if (mode == AllreduceMode::Auto && one_host) return A::Ring;
  return batch_bytes < kDoublingMaxBytes ? A::Doubling : A::HalvingDoubling;
}

bool ring_order(AllreduceMode mode, int n, bool one_host) {
  // Two ranks: every algorithm has the ring's order. Otherwise the choice
  // between the ring and the tree allreduces does not depend on the size.
  return n <= 2 || choose_allreduce(mode, n, one_host, 0) == AllreduceAlgorithm::Ring;
}

const char* allreduce_phase(AllreduceAlgorithm algorithm) {
  switch (algorithm) {
    case AllreduceAlgorithm::Doubling: return "DOUBLING_ALLREDUCE";
    case AllreduceAlgorithm::HalvingDoubling: return "HALVING_DOUBLING_ALLREDUCE";
    case AllreduceAlgorithm::Ring: break;
  }
  return "RING_ALLREDUCE";
}

void allreduce_with(AllreduceAlgorithm algorithm, Mesh& mesh, const Parts& buf,
                    const std::vector<size_t>& chunk_counts, DataType dtype, ReduceOp op, double post_factor) {
  switch (algorithm) {
    case AllreduceAlgorithm::Doubling: return doubling_allreduce(mesh, buf, chunk_counts, dtype, op, post_factor);
    case AllreduceAlgorithm::HalvingDoubling: return halving_doubling_allreduce(mesh, buf, dtype, op, post_factor);
    case AllreduceAlgorithm::Ring: break;
  }
  ring_allreduce(mesh, buf, chunk_counts, dtype, op, post_factor);
}

}  // namespace ring
