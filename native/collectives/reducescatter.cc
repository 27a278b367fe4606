// Ring reduce-scatter.
//
// The buffer is split into n chunks, laid out consecutively by chunk index
// (chunk c holds chunk_counts[c] elements; chunks may be empty). The ranks
// form a ring: rank r sends to right = r+1 and receives from left = r-1.
//
// There are n-1 steps. At step s (0 <= s < n-1) rank r
//   - sends its partial chunk send_chunk = (r - s - 1) mod n to the right,
//   - receives the left neighbour's partial chunk recv_chunk = (r - s - 2) mod n
//     and reduces it into its own copy: own = own (op) received.
// The chunk received at step s is the one sent at step s+1, so every chunk
// travels once around the ring collecting one contribution per rank. At the
// last step (s = n-2) rank r receives chunk (r - n) mod n = r: at the end
// chunk r is complete on rank r; the other chunks hold partial results.
//
// Chunk c starts on rank c+1 and picks up ranks c+2, ..., c+n = c in that
// order, so with fixed chunk boundaries and a fixed ring every element is
// reduced in the same order in every run.
//
// Out of place (src != dst): every chunk a rank reduces is still its own
// original at that point, so the reduction reads it from src and writes
// dst = src (op) received; the first step sends straight from src. dst needs
// no copy of the input beforehand, which saves a pass over the buffer. A
// scale factor (Average, postscale) is applied to chunk r as it completes,
// while it is still in cache.
//
// The receive side never copies a whole chunk: Mesh::sendrecv_sink hands the
// incoming bytes to us in pieces of whole elements (granule = dtype size),
// straight out of the transport's memory, and each piece is reduced into
// place while the send of the other chunk is still in flight.
#include <algorithm>
#include <cstring>
#include <string>

#include "collectives/collectives.h"
#include "common/error.h"
#include "reduce/reduce.h"

namespace ring {

namespace {

// dst = (src (op) piece) * factor, block by block so that dst stays in
// cache between the copy, the reduction and the scaling.
void reduce_from(uint8_t* dst, const uint8_t* src, const uint8_t* piece, size_t len, size_t esize,
                 DataType dtype, ReduceOp op, double factor) {
  constexpr size_t kBlock = 64 << 10;
  for (size_t done = 0; done < len;) {
    size_t k = std::min(kBlock, len - done);
    if (dst != src) std::memcpy(dst + done, src + done, k);
    reduce_into(dst + done, piece + done, k / esize, dtype, op);
    if (factor != 1.0) scale_buffer(dst + done, k / esize, dtype, factor);
    done += k;
  }
}

}  // namespace

void ring_reducescatter(Mesh& mesh, void* buf, const std::vector<size_t>& chunk_counts, DataType dtype,
                        ReduceOp op) {
  ring_reducescatter(mesh, buf, buf, chunk_counts, dtype, op, 1.0);
}

void ring_reducescatter(Mesh& mesh, const void* src, void* dst, const std::vector<size_t>& chunk_counts,
                        DataType dtype, ReduceOp op, double factor) {
  size_t total = 0;
  for (size_t c : chunk_counts) total += c;
  ring_reducescatter(mesh, Parts(src, dst, total * dtype_size(dtype)), chunk_counts, dtype, op, factor);
}

void ring_reducescatter(Mesh& mesh, const Parts& buf, const std::vector<size_t>& chunk_counts, DataType dtype,
                        ReduceOp op, double factor) {
  const int n = mesh.size(), r = mesh.rank();
  if (static_cast<int>(chunk_counts.size()) != n)
    throw_error(ErrorKind::BadArgument, "reducescatter: " + std::to_string(chunk_counts.size()) +
                                            " chunk counts for " + std::to_string(n) + " ranks");
  if (!is_valid_dtype(static_cast<int>(dtype)) || !is_elementwise_reduce_op(static_cast<int>(op)))
    throw_error(ErrorKind::BadArgument, "reducescatter: invalid dtype or op");
  const size_t esize = dtype_size(dtype);
  std::vector<size_t> chunk_offset(n, 0);  // in bytes
  for (int c = 1; c < n; ++c) chunk_offset[c] = chunk_offset[c - 1] + chunk_counts[c - 1] * esize;
  if (n == 1) {
    buf.visit(0, chunk_counts[0] * esize, [&](const uint8_t* in, uint8_t* out, size_t, size_t len) {
      if (in != out) std::memcpy(out, in, len);
      if (factor != 1.0) scale_buffer(out, len / esize, dtype, factor);
    });
    return;
  }

  const int right = (r + 1) % n, left = (r + n - 1) % n;
  for (int step = 0; step < n - 1; ++step) {
    const int send_chunk = ((r - step - 1) % n + n) % n;
    const int recv_chunk = ((r - step - 2) % n + n) % n;
    const size_t recv_at = chunk_offset[recv_chunk];
    const double f = step == n - 2 ? factor : 1.0;  // the last step completes chunk r
    // Step 0 sends this rank's own input; later steps forward partial results.
    mesh.sendrecv_sink(right, buf.pieces(chunk_offset[send_chunk], chunk_counts[send_chunk] * esize, step > 0), left,
                       chunk_counts[recv_chunk] * esize, esize,
                       [&](const uint8_t* piece, size_t offset, size_t len) {
                         buf.visit(recv_at + offset, len, [&](const uint8_t* in, uint8_t* out, size_t at, size_t k) {
                           reduce_from(out, in, piece + at, k, esize, dtype, op, f);
                         });
                       });
  }
}

}  // namespace ring
