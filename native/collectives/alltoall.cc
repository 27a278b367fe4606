// Pairwise-exchange alltoall.
//
// sendbuf holds n send blocks laid out by destination rank (send_bytes[d]
// bytes for rank d); recvbuf receives n blocks laid out by source rank
// (recv_bytes[s] bytes from rank s). Blocks may be empty.
//
// The own block is copied locally. Then there are n-1 steps: at step s
// (1 <= s < n) rank r sends its block for to = r+s and receives the block
// from from = r-s (mod n), in one sendrecv. Over the steps every ordered
// pair of ranks exchanges exactly once, each rank sends to one peer and
// receives from one peer per step, and the peers' steps match (r sends to
// r+s at the step where r+s receives from r), so no step waits on another.
#include <cstring>
#include <string>

#include "collectives/collectives.h"
#include "common/error.h"

namespace ring {

void alltoall(Mesh& mesh, const void* sendbuf, const std::vector<size_t>& send_bytes, void* recvbuf,
              const std::vector<size_t>& recv_bytes) {
  const int n = mesh.size(), r = mesh.rank();
  if (static_cast<int>(send_bytes.size()) != n || static_cast<int>(recv_bytes.size()) != n)
    throw_error(ErrorKind::BadArgument, "alltoall: expected " + std::to_string(n) + " send and receive sizes, got " +
                                            std::to_string(send_bytes.size()) + " and " +
                                            std::to_string(recv_bytes.size()));
  if (send_bytes[r] != recv_bytes[r])
    throw_error(ErrorKind::BadArgument, "alltoall: rank " + std::to_string(r) + " sends " +
                                            std::to_string(send_bytes[r]) + " bytes to itself but expects " +
                                            std::to_string(recv_bytes[r]));

  std::vector<size_t> send_offset(n, 0), recv_offset(n, 0);
  for (int p = 1; p < n; ++p) {
    send_offset[p] = send_offset[p - 1] + send_bytes[p - 1];
    recv_offset[p] = recv_offset[p - 1] + recv_bytes[p - 1];
  }
  const uint8_t* sbase = static_cast<const uint8_t*>(sendbuf);
  uint8_t* rbase = static_cast<uint8_t*>(recvbuf);
  if (send_bytes[r] > 0) std::memmove(rbase + recv_offset[r], sbase + send_offset[r], send_bytes[r]);

  for (int step = 1; step < n; ++step) {
    const int to = (r + step) % n, from = (r - step + n) % n;
    mesh.sendrecv(to, sbase + send_offset[to], send_bytes[to], from, rbase + recv_offset[from], recv_bytes[from]);
  }
}

}  // namespace ring
