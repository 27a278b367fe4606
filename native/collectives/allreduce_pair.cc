// Allreduce between exactly two ranks, in blocks, for large buffers.
//
// With two ranks the ring's two halves are one exchange each: rank r owns
// half r. Done half by half, the reduced half r is long out of cache by the
// time it is sent back, and every byte of the result is written through
// the cache. Here both halves advance block by block (the block size and
// when to stream are chosen from the machine's caches: common/cache_tuning.h):
//
//   for each block k:
//     1. send block k of the peer's half of the input, receive the peer's
//        block k of our half and reduce it: out = in (op) received, scaled
//        (our block k of the result is now complete, and in cache);
//     2. send that block (from cache), receive the peer's completed block k
//        of its half into ours (with streaming stores when the whole
//        buffer is at least cache_tuning().stream_min_bytes).
//
// Per rank that is about two passes over memory (read the input, write the
// output) instead of three; streaming stores also skip reading the
// output's cache lines first, which pays only where memory bandwidth is the
// limit. The reduction order is the ring's (own value
// first, then the peer's), so results are bitwise identical to
// ring_allreduce's with the same chunk boundaries.
#include <algorithm>
#include <cstring>

#include "collectives/collectives.h"
#include "common/cache_tuning.h"
#include "common/error.h"
#include "reduce/copy.h"
#include "reduce/reduce.h"

namespace ring {
namespace {

// dst = (src (op) piece) * factor, in cache-sized steps.
void reduce_block(uint8_t* dst, const uint8_t* src, const uint8_t* piece, size_t len, size_t esize, DataType dtype,
                  ReduceOp op, double factor) {
  if (dst != src) std::memcpy(dst, src, len);
  reduce_into(dst, piece, len / esize, dtype, op);
  if (factor != 1.0) scale_buffer(dst, len / esize, dtype, factor);
}

}  // namespace

void pair_allreduce(Mesh& mesh, const Parts& buf, const std::vector<size_t>& chunk_counts, DataType dtype,
                    ReduceOp op, double post_factor) {
  if (mesh.size() != 2 || chunk_counts.size() != 2)
    throw_error(ErrorKind::BadArgument, "pair_allreduce needs exactly two ranks and two chunks");
  const int me = mesh.rank(), peer = 1 - me;
  const size_t esize = dtype_size(dtype);
  const CacheTuning tuning = cache_tuning();
  const size_t block = std::max(tuning.pair_block_bytes / esize, size_t(1)) * esize;
  const size_t bytes[2] = {chunk_counts[0] * esize, chunk_counts[1] * esize};
  const size_t offset[2] = {0, bytes[0]};
  const size_t longest = std::max(bytes[0], bytes[1]);
  const bool stream_buffer = bytes[0] + bytes[1] >= tuning.stream_min_bytes;
  for (size_t pos = 0; pos < longest; pos += block) {
    const size_t mine = pos < bytes[me] ? std::min(block, bytes[me] - pos) : 0;
    const size_t theirs = pos < bytes[peer] ? std::min(block, bytes[peer] - pos) : 0;
    const size_t own_at = offset[me] + pos, their_at = offset[peer] + pos;
    mesh.sendrecv_sink(peer, buf.pieces(their_at, theirs, false), peer, mine, esize,
                       [&](const uint8_t* piece, size_t at, size_t len) {
                         buf.visit(own_at + at, len, [&](const uint8_t* in, uint8_t* out, size_t k, size_t n) {
                           reduce_block(out, in, piece + k, n, esize, dtype, op, post_factor);
                         });
                       });
    // Decided by the block, not by its parts.
    const bool stream = stream_buffer && theirs >= kMinStreamBytes;
    mesh.sendrecv_sink(peer, buf.pieces(own_at, mine, true), peer, theirs, 1,
                       [&](const uint8_t* piece, size_t at, size_t len) {
                         buf.visit(their_at + at, len, [&](const uint8_t*, uint8_t* out, size_t k, size_t n) {
                           if (stream) stream_store(out, piece + k, n);
                           else std::memcpy(out, piece + k, n);
                         });
                       });
    if (stream) stream_fence();
  }
}

}  // namespace ring
