// Ring allreduce, in place: a ring reduce-scatter followed by a ring
// allgather of the reduced chunks.
//
// The buffer is split into n chunks laid out consecutively by chunk index
// (chunk c holds chunk_counts[c] elements; a chunk may be empty when the
// element count is smaller than n, or all may be empty).
//
//   1. Reduce-scatter, n-1 steps (reducescatter.cc): every chunk travels
//      once around the ring and is reduced into each rank's copy straight
//      out of the transport; afterwards chunk r is complete on rank r.
//   2. Allgather, n-1 steps (allgather.cc): at step s rank r forwards chunk
//      (r - s) mod n to the right and receives chunk (r - s - 1) mod n from
//      the left into its place with a plain sendrecv. Every rank ends up with
//      byte-for-byte copies of the one complete version of each chunk.
//
// Each rank sends and receives 2 (n-1)/n of the buffer in total, the
// bandwidth optimum. Determinism: every element of chunk c is reduced in the
// fixed order c+1, c+2, ..., c (rank indices mod n), and the allgather only
// copies, so results are bitwise identical on every rank and in every run
// with the same chunk boundaries. n == 1 is a no-op (in place) or a copy.
//
// Out of place (src -> dst, see reducescatter.cc) the input is never copied
// first, and a scale factor (Average, postscale) is applied by each rank to
// its complete chunk only, between the two halves: the whole operation makes
// about two passes over memory instead of four.
#include <string>

#include "collectives/collectives.h"
#include "common/error.h"
#include "reduce/reduce.h"

namespace ring {
namespace {

// Two ranks and at least this much data: pair_allreduce (allreduce_pair.cc).
constexpr size_t kPairMinBytes = 1 << 20;

}  // namespace

void ring_allreduce(Mesh& mesh, void* buf, const std::vector<size_t>& chunk_counts, DataType dtype,
                    ReduceOp op) {
  ring_allreduce(mesh, buf, buf, chunk_counts, dtype, op, 1.0);
}

void ring_allreduce(Mesh& mesh, const void* src, void* dst, const std::vector<size_t>& chunk_counts,
                    DataType dtype, ReduceOp op, double post_factor) {
  size_t total = 0;
  for (size_t c : chunk_counts) total += c;
  ring_allreduce(mesh, Parts(src, dst, total * dtype_size(dtype)), chunk_counts, dtype, op, post_factor);
}

void ring_allreduce(Mesh& mesh, const Parts& buf, const std::vector<size_t>& chunk_counts, DataType dtype,
                    ReduceOp op, double post_factor) {
  const int n = mesh.size();
  if (static_cast<int>(chunk_counts.size()) != n)
    throw_error(ErrorKind::BadArgument, "allreduce: " + std::to_string(chunk_counts.size()) +
                                            " chunk counts for " + std::to_string(n) + " ranks");
  const size_t esize = dtype_size(dtype);
  if (n == 2 && (chunk_counts[0] + chunk_counts[1]) * esize >= kPairMinBytes)
    return pair_allreduce(mesh, buf, chunk_counts, dtype, op, post_factor);
  // Only the complete chunk is scaled, by its owner; the allgather copies it.
  ring_reducescatter(mesh, buf, chunk_counts, dtype, op, post_factor);
  std::vector<size_t> chunk_bytes(n);
  for (int c = 0; c < n; ++c) chunk_bytes[c] = chunk_counts[c] * esize;
  if (n > 1) ring_allgather(mesh, buf, chunk_bytes);
}

}  // namespace ring
