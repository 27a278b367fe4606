// Which allreduce algorithm runs a batch of tensors: the rule, in one place.
//
// Results must not depend on what was fused with what (a tensor's batch
// depends on timing), so a job keeps every tensor in one reduction order
// and only switches between algorithms that share it:
//   - one host: the ring, except for two ranks, where every algorithm has
//     the ring's order and recursive doubling (one step instead of two)
//     runs batches under 16 KiB;
//   - several hosts, a power of two of at least 4 ranks: the binary tree's
//     order (collectives/tree_order.h), by recursive doubling for batches
//     under 64 KiB and by recursive halving and doubling above (measured
//     with 8 ranks on 4 hosts 0.5 ms apart: faster than the ring at every
//     size from 4 B to 4 MiB; docs/scaling.md); two ranks as on one host;
//   - any other number of ranks: the ring.
// The hierarchical allreduce's cross-host stage follows the same rule for
// its mesh of one rank per host. RING_ALLREDUCE_ALGORITHM=ring, tree,
// doubling or halving-doubling forces one choice for every tensor (the
// tree ones where the number of ranks allows them).
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

// The algorithm for a batch of `batch_bytes` on n ranks (`one_host`: all
// on this host).
AllreduceAlgorithm choose_allreduce(AllreduceMode mode, int n, bool one_host, size_t batch_bytes);

// Whether every allreduce of a job of n ranks (without the hierarchical
// allreduce) reduces in the ring's order (collectives/reducescatter.cc:
// slice c of a tensor as x_c (op) (x_(c-1) (op) ... (op) x_(c+1))), at
// every batch size: false where choose_allreduce takes the tree's order.
bool ring_order(AllreduceMode mode, int n, bool one_host);

// The timeline phase of an algorithm (RING_ALLREDUCE, ...).
const char* allreduce_phase(AllreduceAlgorithm algorithm);

// Runs `algorithm` on `buf` (collectives.h: ring_allreduce and the tree
// allreduces, which it must suit: see choose_allreduce).
void allreduce_with(AllreduceAlgorithm algorithm, Mesh& mesh, const Parts& buf,
                    const std::vector<size_t>& chunk_counts, DataType dtype, ReduceOp op, double post_factor);

}  // namespace ring
