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
// The receive side never copies a whole chunk: Mesh::sendrecv_sink hands the
// incoming bytes to us in pieces of whole elements (granule = dtype size),
// straight out of the transport's memory, and each piece is reduced into
// place while the send of the other chunk is still in flight.
#include <string>

#include "collectives/collectives.h"
#include "common/error.h"
#include "reduce/reduce.h"

namespace ring {

void ring_reducescatter(Mesh& mesh, void* buf, const std::vector<size_t>& chunk_counts, DataType dtype,
                        ReduceOp op) {
  const int n = mesh.size(), r = mesh.rank();
  if (static_cast<int>(chunk_counts.size()) != n)
    throw_error(ErrorKind::BadArgument, "reducescatter: " + std::to_string(chunk_counts.size()) +
                                            " chunk counts for " + std::to_string(n) + " ranks");
  if (!is_valid_dtype(static_cast<int>(dtype)) || !is_valid_reduce_op(static_cast<int>(op)))
    throw_error(ErrorKind::BadArgument, "reducescatter: invalid dtype or op");
  if (n == 1) return;

  const size_t esize = dtype_size(dtype);
  std::vector<size_t> chunk_offset(n, 0);  // in bytes
  for (int c = 1; c < n; ++c) chunk_offset[c] = chunk_offset[c - 1] + chunk_counts[c - 1] * esize;

  uint8_t* base = static_cast<uint8_t*>(buf);
  const int right = (r + 1) % n, left = (r + n - 1) % n;
  for (int step = 0; step < n - 1; ++step) {
    const int send_chunk = ((r - step - 1) % n + n) % n;
    const int recv_chunk = ((r - step - 2) % n + n) % n;
    uint8_t* own = base + chunk_offset[recv_chunk];
    mesh.sendrecv_sink(right, base + chunk_offset[send_chunk], chunk_counts[send_chunk] * esize, left,
                       chunk_counts[recv_chunk] * esize, esize,
                       [own, esize, dtype, op](const uint8_t* piece, size_t offset, size_t len) {
                         reduce_into(own + offset, piece, len / esize, dtype, op);
                       });
  }
}

}  // namespace ring
