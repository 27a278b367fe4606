#include "collectives/allreduce_choice.h"

#include "collectives/tree_order.h"

namespace ring {
namespace {

// Below these batch sizes recursive doubling beats the algorithm the batch
// would take otherwise (measured: docs/scaling.md).
constexpr size_t kDoublingMaxBytesTwoRanks = 4 << 10;
constexpr size_t kDoublingMaxBytes = 64 << 10;

}  // namespace

AllreduceAlgorithm choose_allreduce(AllreduceMode mode, int n, bool one_host, size_t largest_tensor,
                                    size_t batch_bytes) {
  if (mode == AllreduceMode::Ring || !is_power_of_two(n) || n < 2) return AllreduceAlgorithm::Ring;
  if (n == 2)
    return batch_bytes < kDoublingMaxBytesTwoRanks ? AllreduceAlgorithm::Doubling : AllreduceAlgorithm::Ring;
  if (mode == AllreduceMode::Auto && largest_tensor >= alone_bytes(one_host)) return AllreduceAlgorithm::Ring;
  return batch_bytes < kDoublingMaxBytes ? AllreduceAlgorithm::Doubling : AllreduceAlgorithm::HalvingDoubling;
}

const char* allreduce_phase(AllreduceAlgorithm algorithm) {
  switch (algorithm) {
    case AllreduceAlgorithm::Doubling: return "DOUBLING_ALLREDUCE";
    case AllreduceAlgorithm::HalvingDoubling: return "HALVING_DOUBLING_ALLREDUCE";
    case AllreduceAlgorithm::Ring: break;
  }
  return "RING_ALLREDUCE";
}

}  // namespace ring
