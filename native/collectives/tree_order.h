// The binary-tree reduction order shared by the two tree allreduces
// (doubling_allreduce.cc for small buffers, halving_doubling_allreduce.cc
// for large ones), which is what lets the engine switch between them by
// size without changing a single bit of any result.
//
// For a power-of-two number of ranks p, level k (k = 0, 1, ..., log2 p - 1)
// combines the partial result of each block of 2^k ranks with that of the
// next block, the lower block's on the left:
//   p = 4:  (x0 (op) x1) (op) (x2 (op) x3)
// Every element is reduced in this order on every rank, in every run,
// whatever the buffer's length or layout. (The order matters even for
// commutative ops: Min and Max of +0 and -0, and NaN payloads.)
//
// Two ranks are special: the ring and the pair allreduce reduce chunk c as
// x_c (op) x_(1-c), so the tree allreduces do the same for n == 2 and all
// four algorithms give identical bits there.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/types.h"

namespace ring {

inline bool is_power_of_two(int n) { return n > 0 && (n & (n - 1)) == 0; }

// out = own (op) received when own_first, else received (op) own, for `len`
// bytes of whole elements. `own` may equal `out`; `received` aliases
// neither. `scratch` is working memory the caller keeps between calls.
void reduce_ordered(uint8_t* out, const uint8_t* own, const uint8_t* received, size_t len, DataType dtype,
                    ReduceOp op, bool own_first, std::vector<uint8_t>& scratch);

// Whether this rank's value goes first when it combines with `partner` at
// a level of the tree: the lower rank's block first, except for two ranks,
// where the owner of the element's chunk (chunk 0: the first chunk_bytes0
// bytes) goes first. `at` is the element's byte offset in the buffer.
inline bool own_first(int rank, int partner, int n, size_t at, size_t chunk_bytes0) {
  if (n == 2) return (at < chunk_bytes0) == (rank == 0);
  return rank < partner;
}

}  // namespace ring
