// Hierarchical allreduce, for jobs of several hosts with several ranks each:
//
//   1. Reduce-scatter inside each host (shared memory): the buffer is split
//      into local_size chunks (laid out as the caller says, like the flat
//      ring's); local rank l ends with chunk l reduced over its host.
//   2. Allreduce of chunk l across hosts, among the ranks with local rank l
//      (one rank per host, over TCP), scaled by post_factor.
//   3. Allgather inside each host: every rank gets every chunk.
//
// Each host's network link carries 2 (hosts-1)/hosts of the buffer in each
// direction, spread over local_size connections, instead of the flat ring's
// 2 (n-1)/n over the one or two ring edges that leave the host; the heavy
// reduction traffic stays in shared memory. Results are identical on every
// rank (each element is reduced in a fixed order: its host's ring, then the
// cross-host ring), though not bitwise equal to the flat ring's order.
#include <string>

#include "collectives/allreduce_choice.h"
#include "collectives/collectives.h"
#include "collectives/slices.h"
#include "common/error.h"

namespace ring {

void hierarchical_allreduce(Mesh& local, Mesh& cross, const Parts& buf, const std::vector<size_t>& chunks,
                            DataType dtype, ReduceOp op, double post_factor, AllreduceAlgorithm cross_algorithm) {
  const int l = local.rank();
  const size_t esize = dtype_size(dtype);
  if (static_cast<int>(chunks.size()) != local.size())
    throw_error(ErrorKind::BadArgument, "hierarchical allreduce: " + std::to_string(chunks.size()) +
                                            " chunk counts for " + std::to_string(local.size()) + " local ranks");
  size_t offset = 0;
  for (int c = 0; c < l; ++c) offset += chunks[c] * esize;
  ring_reducescatter(local, buf, chunks, dtype, op, 1.0);
  allreduce_with(cross_algorithm, cross, buf.output_range(offset, chunks[l] * esize),
                 slice_counts(chunks[l], cross.size()), dtype, op, post_factor);
  std::vector<size_t> bytes(chunks.size());
  for (size_t c = 0; c < chunks.size(); ++c) bytes[c] = chunks[c] * esize;
  if (local.size() > 1) ring_allgather(local, buf, bytes);
}

}  // namespace ring
