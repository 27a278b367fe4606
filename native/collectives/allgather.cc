// Ring allgather of variable-size blocks, in place.
//
// The buffer holds n blocks laid out consecutively by rank (block r is
// block_bytes[r] bytes, possibly zero); rank r starts with only its own
// block r in place. The ranks form a ring: rank r sends to right = r+1 and
// receives from left = r-1.
//
// There are n-1 steps. At step s (0 <= s < n-1) rank r sends
// send_block = (r - s) mod n to the right and receives
// recv_block = (r - s - 1) mod n from the left, straight into its place in
// the buffer. The block received at step s is the one forwarded at step
// s+1; after the last step every rank holds every block. The two blocks of
// a step are distinct, so sending and receiving never touch the same bytes.
#include <cstring>
#include <string>

#include "collectives/collectives.h"
#include "common/error.h"

namespace ring {

void ring_allgather(Mesh& mesh, void* buf, const std::vector<size_t>& block_bytes) {
  size_t total = 0;
  for (size_t b : block_bytes) total += b;
  ring_allgather(mesh, Parts(buf, buf, total), block_bytes);
}

void ring_allgather(Mesh& mesh, const Parts& buf, const std::vector<size_t>& block_bytes) {
  const int n = mesh.size(), r = mesh.rank();
  if (static_cast<int>(block_bytes.size()) != n)
    throw_error(ErrorKind::BadArgument, "allgather: " + std::to_string(block_bytes.size()) +
                                            " block sizes for " + std::to_string(n) + " ranks");
  if (n == 1) return;

  std::vector<size_t> block_offset(n, 0);
  for (int b = 1; b < n; ++b) block_offset[b] = block_offset[b - 1] + block_bytes[b - 1];

  const int right = (r + 1) % n, left = (r + n - 1) % n;
  for (int step = 0; step < n - 1; ++step) {
    const int send_block = ((r - step) % n + n) % n;
    const int recv_block = ((r - step - 1) % n + n) % n;
    const size_t recv_at = block_offset[recv_block];
    mesh.sendrecv_sink(right, buf.pieces(block_offset[send_block], block_bytes[send_block], true), left,
                       block_bytes[recv_block], 1, [&](const uint8_t* piece, size_t offset, size_t len) {
                         buf.visit(recv_at + offset, len, [&](const uint8_t*, uint8_t* out, size_t at, size_t k) {
                           std::memcpy(out, piece + at, k);
                         });
                       });
  }
}

}  // namespace ring
