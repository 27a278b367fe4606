// How `count` items (elements or rows) are split over n ranks, in rank
// order: rank c gets count / n, plus one when c < count % n.
//
// The one rule for every even split in the engine: the ring allreduce's
// chunks, the fusion buffer's chunk-major layout, the hierarchical
// allreduce's cross-host stage, and the rows each rank receives from a
// reducescatter (exported to Python as _native.reducescatter_rows).
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace ring {

// Items of slice c.
inline size_t slice_count(size_t count, int n, int c) {
  return count / n + (static_cast<size_t>(c) < count % n ? 1 : 0);
}

// Items before slice c.
inline size_t slice_offset(size_t count, int n, int c) {
  return count / n * c + std::min<size_t>(c, count % n);
}

// slice_count for every slice.
inline std::vector<size_t> slice_counts(size_t count, int n) {
  std::vector<size_t> counts(n);
  for (int c = 0; c < n; ++c) counts[c] = slice_count(count, n, c);
  return counts;
}

}  // namespace ring
