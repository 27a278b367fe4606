// Recursive halving and doubling allreduce, for large buffers: the
// bandwidth-optimal tree allreduce, with the reduction order of recursive
// doubling (tree_order.h), so the engine may switch between the two by size.
//
// p ranks (a power of two). Reduce-scatter by recursive halving, log2 p
// steps: at step k rank r and its partner r XOR 2^k hold the same segment
// (they agree on every earlier bit); the one whose bit k is 0 keeps the
// lower half of it, the other the upper half; each sends the half it gives
// up and combines the partner's copy of the half it keeps, lower block
// first, straight out of the transport. Afterwards rank r holds its final
// segment (about 1/p of the buffer) reduced over all ranks, and scales it
// by post_factor. Allgather by recursive doubling, the same steps in
// reverse: each rank sends its segment and receives its partner's, the
// other half of the segment they held one step before.
//
// Each rank sends and receives 2 (p-1)/p of the buffer, as in the ring,
// in 2 log2 p steps instead of 2 (p-1).
#include <cstring>
#include <string>
#include <utility>

#include "collectives/collectives.h"
#include "collectives/tree_order.h"
#include "common/error.h"
#include "reduce/reduce.h"

namespace ring {

void halving_doubling_allreduce(Mesh& mesh, const Parts& buf, DataType dtype, ReduceOp op, double post_factor) {
  const int n = mesh.size(), r = mesh.rank();
  if (!is_power_of_two(n) || n < 4)
    throw_error(ErrorKind::BadArgument, "halving-doubling allreduce: needs a power-of-two number of ranks, at "
                                        "least 4 (" + std::to_string(n) + " ranks)");
  const size_t esize = dtype_size(dtype);
  std::vector<uint8_t> scratch;
  std::vector<std::pair<size_t, size_t>> held;  // the segment before each step, in elements [lo, hi)
  size_t lo = 0, hi = buf.bytes() / esize;
  for (int d = 1; d < n; d <<= 1) {
    const int partner = r ^ d;
    const bool low = (r & d) == 0;
    const size_t mid = lo + (hi - lo) / 2;
    const size_t keep = low ? lo : mid, keep_end = low ? mid : hi;
    const size_t give = low ? mid : lo, give_end = low ? hi : mid;
    const bool first_step = d == 1;  // the inputs are still this rank's partial
    mesh.sendrecv_sink(partner, buf.pieces(give * esize, (give_end - give) * esize, !first_step), partner,
                       (keep_end - keep) * esize, esize, [&](const uint8_t* piece, size_t at, size_t len) {
                         buf.visit(keep * esize + at, len, [&](const uint8_t* in, uint8_t* out, size_t k, size_t m) {
                           reduce_ordered(out, first_step ? in : out, piece + k, m, dtype, op, low, scratch);
                         });
                       });
    held.push_back({lo, hi});
    lo = keep;
    hi = keep_end;
  }
  if (post_factor != 1.0)
    buf.visit(lo * esize, (hi - lo) * esize, [&](const uint8_t*, uint8_t* out, size_t, size_t len) {
      scale_buffer(out, len / esize, dtype, post_factor);
    });
  for (int d = n >> 1; d >= 1; d >>= 1) {
    const int partner = r ^ d;
    const auto [plo, phi] = held.back();
    held.pop_back();
    const bool low = (r & d) == 0;  // this rank kept the lower half at this step
    const size_t other = low ? hi : plo, other_end = low ? phi : lo;
    mesh.sendrecv_sink(partner, buf.pieces(lo * esize, (hi - lo) * esize, true), partner,
                       (other_end - other) * esize, 1, [&](const uint8_t* piece, size_t at, size_t len) {
                         buf.visit(other * esize + at, len, [&](const uint8_t*, uint8_t* out, size_t k, size_t m) {
                           std::memcpy(out, piece + k, m);
                         });
                       });
    lo = plo;
    hi = phi;
  }
}

}  // namespace ring
