// The collective algorithms, one per source file, written only against the
// Mesh. All are blocking and called on every rank of the mesh with matching
// arguments (the engine has already negotiated sizes). Buffers are plain
// host memory. Byte counts given per rank are indexed by rank.
//
// Determinism: for a fixed world size and fixed chunk boundaries, every
// element is reduced in the same order in every run and the result is
// bitwise identical on every rank.
#pragma once

#include <cstddef>
#include <vector>

#include "collectives/allreduce_choice.h"
#include "collectives/parts.h"
#include "common/types.h"
#include "transport/mesh.h"

namespace ring {

// In-place ring allreduce of `buf`, split into size() chunks of
// chunk_counts[c] elements (laid out consecutively, sum = total count).
// Reduce-scatter (chunk c is completed on rank c) then allgather, each step
// streamed through the transport and reduced straight out of it.
// ReduceOp::Average reduces as Sum.
void ring_allreduce(Mesh& mesh, void* buf, const std::vector<size_t>& chunk_counts, DataType dtype,
                    ReduceOp op);
// Out of place: reads `src`, leaves the result in `dst` (same layout; src
// may equal dst), multiplied by post_factor (each rank scales the chunk it
// completes before the allgather, so every rank gets the same bits).
void ring_allreduce(Mesh& mesh, const void* src, void* dst, const std::vector<size_t>& chunk_counts,
                    DataType dtype, ReduceOp op, double post_factor);
// The same on a buffer in parts (parts.h): what the input pointer reads
// above is read from each part's input, what dst receives goes to each
// part's output. Every collective below that takes Parts works this way.
void ring_allreduce(Mesh& mesh, const Parts& buf, const std::vector<size_t>& chunk_counts, DataType dtype,
                    ReduceOp op, double post_factor);

// In-place ring reduce-scatter with the same chunk layout as ring_allreduce:
// afterwards chunk rank() of `buf` holds the reduction of that chunk over all
// ranks; other chunks hold partial results.
void ring_reducescatter(Mesh& mesh, void* buf, const std::vector<size_t>& chunk_counts, DataType dtype,
                        ReduceOp op);
// The same result as the out-of-place ring_allreduce for exactly two ranks,
// block by block so each completed block is sent back while in cache, and
// received results are written with streaming stores. allreduce_pair.cc.
void pair_allreduce(Mesh& mesh, const Parts& buf, const std::vector<size_t>& chunk_counts, DataType dtype,
                    ReduceOp op, double post_factor);

// Out of place: reads `src`; the reduced chunks land in `dst` (chunk rank()
// complete and multiplied by `factor`, the partial ones that passed through
// this rank hold partial results, the one this rank only sent is untouched).
void ring_reducescatter(Mesh& mesh, const void* src, void* dst, const std::vector<size_t>& chunk_counts,
                        DataType dtype, ReduceOp op, double factor);
void ring_reducescatter(Mesh& mesh, const Parts& buf, const std::vector<size_t>& chunk_counts, DataType dtype,
                        ReduceOp op, double factor);

// Allreduce of `buf` (inputs into outputs), split into local.size() chunks of
// chunk_counts[c] elements, in three stages:
// reduce-scatter within `local` (the ranks of this host), allreduce of this
// rank's chunk within `cross` (the ranks with this local rank, one per
// host) by `cross_algorithm` (allreduce_choice.h), allgather within `local`. Every rank of the job calls it with
// meshes of the same shape. See hierarchical_allreduce.cc.
void hierarchical_allreduce(Mesh& local, Mesh& cross, const Parts& buf, const std::vector<size_t>& chunk_counts,
                            DataType dtype, ReduceOp op, double post_factor,
                            AllreduceAlgorithm cross_algorithm = AllreduceAlgorithm::Ring);

// The tree allreduces (tree_order.h): every element reduced in the binary
// tree's order, the same in both, so results do not depend on which one
// ran. A power-of-two number of ranks only.
// Recursive doubling, for small buffers: log2 n steps, each exchanging the
// whole buffer; for two ranks the chunks combine as in ring_allreduce
// (chunk_counts gives them), so the two give identical results there.
// doubling_allreduce.cc.
void doubling_allreduce(Mesh& mesh, const Parts& buf, const std::vector<size_t>& chunk_counts, DataType dtype,
                        ReduceOp op, double post_factor);
// Recursive halving then doubling, for large buffers (at least 4 ranks):
// 2 log2 n steps moving 2 (n-1)/n of the buffer. halving_doubling_allreduce.cc.
void halving_doubling_allreduce(Mesh& mesh, const Parts& buf, DataType dtype, ReduceOp op, double post_factor);

// Ring allgather of variable-size blocks into `buf` (total = sum of
// block_bytes, block r at offset sum(block_bytes[0..r))). This rank's block
// must already be in place.
void ring_allgather(Mesh& mesh, void* buf, const std::vector<size_t>& block_bytes);
// The same over the outputs of `buf` (the inputs are not read).
void ring_allgather(Mesh& mesh, const Parts& buf, const std::vector<size_t>& block_bytes);

// Broadcast of `bytes` bytes in `buf` from `root` to every rank, pipelined
// along a chain that starts at root.
void broadcast(Mesh& mesh, void* buf, size_t bytes, int root);

// Personalised exchange: send_bytes[r] bytes go from `sendbuf` (blocks laid
// out by rank) to rank r, recv_bytes[r] bytes arrive from rank r into
// `recvbuf` (blocks laid out by rank). Pairwise exchange in size()-1 steps.
void alltoall(Mesh& mesh, const void* sendbuf, const std::vector<size_t>& send_bytes, void* recvbuf,
              const std::vector<size_t>& recv_bytes);

// Adasum allreduce, in place, of several tensors of one floating dtype
// (tensors[i] holds counts[i] elements): every rank ends with the adaptive
// sum of all ranks' tensors, combined pairwise with
//   (1 - a.b / (2 |a|^2)) a + (1 - a.b / (2 |b|^2)) b
// per tensor, by recursive vector halving and distance doubling. A side
// whose squared norm is 0 gets coefficient 1 (the other side passes through
// unchanged; two zero sides give zero). mesh.size() must be a power of two.
// Results do not depend on which tensors were fused together. adasum.cc.
void adasum_allreduce(Mesh& mesh, const std::vector<void*>& tensors, const std::vector<size_t>& counts,
                      DataType dtype);

// Returns once every rank has entered.
void barrier(Mesh& mesh);

}  // namespace ring
