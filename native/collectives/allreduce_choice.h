// Which allreduce algorithm runs a batch of tensors: the rule, in one place.
//
// The engine fuses allreduces below alone_bytes() into batches and runs
// larger ones alone (engine/coordinator.h). Results must not depend on what
// was fused with what, so the algorithm's reduction order may depend on a
// tensor's own size, never on its batch's:
//   - two ranks: every algorithm reduces in the ring's order, so the batch's
//     size alone picks recursive doubling (one step) for small batches and
//     the ring (or its pair form) for large ones;
//   - a power of two of at least 4 ranks on several hosts: tensors below
//     alone_bytes() are reduced in the binary tree's order
//     (collectives/tree_order.h), by recursive doubling for small batches
//     and by recursive halving and doubling for large ones; larger tensors
//     by the ring (within one host, where a step costs microseconds, the
//     ring was as fast at every size: docs/scaling.md);
//   - any other number of ranks: the ring.
// RING_ALLREDUCE_ALGORITHM=ring or tree forces one order for every tensor
// (tree: where the number of ranks allows it; for two ranks, recursive
// doubling at every size).
#pragma once

#include <cstddef>
#include <vector>

#include "collectives/parts.h"
#include "common/types.h"
#include "transport/mesh.h"

namespace ring {

// RING_ALLREDUCE_ALGORITHM's values, in this order: auto, ring, tree,
// doubling, halving-doubling (the last two force one tree allreduce, for
// measuring; they fall back as tree does).
enum class AllreduceMode { Auto, Ring, Tree, Doubling, HalvingDoubling };
constexpr const char* kAllreduceModeNames[] = {"auto", "ring", "tree", "doubling", "halving-doubling"};
enum class AllreduceAlgorithm { Ring, Doubling, HalvingDoubling };

// Allreduces of at least this many bytes run alone instead of fused: over
// shared memory (`one_host`) a 128 KiB allreduce already runs near full
// speed alone; across hosts each operation's latency weighs more.
inline size_t alone_bytes(bool one_host) { return one_host ? size_t(128) << 10 : size_t(1) << 20; }

// The algorithm for a batch of `batch_bytes` on n ranks whose largest
// tensor has `largest_tensor` bytes.
AllreduceAlgorithm choose_allreduce(AllreduceMode mode, int n, bool one_host, size_t largest_tensor,
                                    size_t batch_bytes);

// The timeline phase of an algorithm (RING_ALLREDUCE, ...).
const char* allreduce_phase(AllreduceAlgorithm algorithm);

// Runs `algorithm` on `buf` (collectives.h: ring_allreduce and the tree
// allreduces, which it must suit: see choose_allreduce).
void allreduce_with(AllreduceAlgorithm algorithm, Mesh& mesh, const Parts& buf,
                    const std::vector<size_t>& chunk_counts, DataType dtype, ReduceOp op, double post_factor);

}  // namespace ring
