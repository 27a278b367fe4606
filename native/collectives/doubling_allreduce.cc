// Recursive doubling allreduce, for small buffers: the latency-optimal
// tree allreduce.
//
// p ranks (a power of two) take log2 p steps. At step k rank r exchanges
// its whole partial result with rank r XOR 2^k and combines the two in the
// tree order (tree_order.h), so after step k every rank holds the
// reduction over its block of 2^(k+1) ranks; after the last, every rank
// holds the full result, identical bits on every rank (both partners
// compute the same combination). The buffer crosses the wire log2 p times
// instead of the ring's 2 (p-1)/p, but with log2 p steps instead of
// 2 (p-1): the right trade while a step's latency outweighs the bytes.
//
// The received partial lands in scratch memory first (the rank is sending
// its own partial from the output at the same time), then is combined into
// the outputs. post_factor scales the result on every rank alike.
#include <cstring>
#include <string>
#include <utility>

#include "collectives/collectives.h"
#include "collectives/tree_order.h"
#include "common/error.h"
#include "reduce/reduce.h"

namespace ring {

void doubling_allreduce(Mesh& mesh, const Parts& buf, const std::vector<size_t>& chunk_counts, DataType dtype,
                        ReduceOp op, double post_factor) {
  const int n = mesh.size(), r = mesh.rank();
  if (!is_power_of_two(n) || static_cast<int>(chunk_counts.size()) != n)
    throw_error(ErrorKind::BadArgument, "doubling allreduce: needs a power-of-two number of ranks and a chunk count "
                                        "for each (" + std::to_string(n) + " ranks)");
  const size_t esize = dtype_size(dtype), bytes = buf.bytes(), chunk0 = chunk_counts[0] * esize;
  std::vector<uint8_t> received(bytes), scratch;
  // The byte ranges combined in one operand order: the two chunks for two
  // ranks (tree_order.h), else the whole buffer.
  std::vector<std::pair<size_t, size_t>> ranges;  // (offset, length)
  if (n == 2) ranges = {{0, chunk0}, {chunk0, bytes - chunk0}};
  else ranges = {{0, bytes}};
  bool reduced = false;  // the outputs hold this rank's partial (else the inputs still do)
  for (int d = 1; d < n; d <<= 1) {
    const int partner = r ^ d;
    mesh.sendrecv_sink(partner, buf.pieces(0, bytes, reduced), partner, bytes, 1,
                       [&](const uint8_t* data, size_t at, size_t len) { std::memcpy(received.data() + at, data, len); });
    for (const auto& range : ranges) {
      const bool first = own_first(r, partner, n, range.first, chunk0);
      buf.visit(range.first, range.second, [&](const uint8_t* in, uint8_t* out, size_t at, size_t len) {
        reduce_ordered(out, reduced ? out : in, received.data() + range.first + at, len, dtype, op, first, scratch);
      });
    }
    reduced = true;
  }
  buf.visit(0, bytes, [&](const uint8_t* in, uint8_t* out, size_t, size_t len) {
    if (!reduced && in != out) std::memcpy(out, in, len);  // one rank
    if (post_factor != 1.0) scale_buffer(out, len / esize, dtype, post_factor);
  });
}

}  // namespace ring
