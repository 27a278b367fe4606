// Pipelined chain broadcast.
//
// The ranks form a chain that starts at the root: root -> root+1 -> ... ->
// root-1 (indices mod n). A rank's position in the chain is
// pos = (rank - root) mod n; it receives from prev = rank-1 (unless it is the
// root) and forwards to next = rank+1 (unless it is the last, pos = n-1).
//
// The buffer is cut into segments of kSegmentBytes (the last one shorter).
// A middle rank works in num_segments+1 steps: at step k it forwards segment
// k-1 to next while receiving segment k from prev, in one sendrecv, so every
// link of the chain is busy at once and the time is about
// bytes/bandwidth + (n-2) * segment/bandwidth instead of (n-1) * bytes/bandwidth.
// The root only sends and the last rank only receives; both do it in one
// call, as the transport streams the bytes anyway.
#include <algorithm>
#include <string>

#include "collectives/collectives.h"
#include "common/error.h"

namespace ring {
namespace {

constexpr size_t kSegmentBytes = 256 * 1024;

}  // namespace

void broadcast(Mesh& mesh, void* buf, size_t bytes, int root) {
  const int n = mesh.size(), r = mesh.rank();
  if (root < 0 || root >= n)
    throw_error(ErrorKind::BadArgument,
                "broadcast: root rank " + std::to_string(root) + " is not in [0, " + std::to_string(n) + ")");
  if (n == 1 || bytes == 0) return;

  uint8_t* base = static_cast<uint8_t*>(buf);
  const int pos = (r - root + n) % n;
  const int prev = (r + n - 1) % n, next = (r + 1) % n;
  if (pos == 0) return mesh.send(next, base, bytes);
  if (pos == n - 1) return mesh.recv(prev, base, bytes);

  const size_t num_segments = (bytes + kSegmentBytes - 1) / kSegmentBytes;
  auto segment_len = [bytes](size_t k) { return std::min(kSegmentBytes, bytes - k * kSegmentBytes); };
  for (size_t k = 0; k <= num_segments; ++k) {
    const bool forward = k > 0, receive = k < num_segments;
    mesh.sendrecv(forward ? next : -1, forward ? base + (k - 1) * kSegmentBytes : nullptr,
                  forward ? segment_len(k - 1) : 0, receive ? prev : -1,
                  receive ? base + k * kSegmentBytes : nullptr, receive ? segment_len(k) : 0);
  }
}

}  // namespace ring
