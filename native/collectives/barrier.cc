// Dissemination barrier (Hensgen, Finkel and Manber).
//
// In round k (distance = 1, 2, 4, ... < n) rank r sends one byte to
// r + distance and waits for one byte from r - distance (mod n). After
// ceil(log2 n) rounds every rank has heard, directly or through a chain of
// earlier rounds, from every other rank since it entered, so none returns
// before all have entered. Each ordered pair of ranks exchanges at most one
// byte per barrier (distances are distinct and below n), so successive
// barriers and other collectives on the same channels never mix up bytes.
#include <cstdint>

#include "collectives/collectives.h"

namespace ring {

void barrier(Mesh& mesh) {
  const int n = mesh.size(), r = mesh.rank();
  uint8_t token = 1, received = 0;
  for (int distance = 1; distance < n; distance *= 2) {
    mesh.sendrecv((r + distance) % n, &token, 1, (r - distance + n) % n, &received, 1);
  }
}

}  // namespace ring
