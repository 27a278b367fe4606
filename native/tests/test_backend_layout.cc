// Where the hierarchical allreduce (and so the fast path's order) is used:
// engine/backends/registry.h's layout rules, which every rank must answer
// alike from the job's hosts.
#include <string>
#include <vector>

#include "engine/backends/registry.h"
#include "tests/harness.h"

namespace {

using ring::BackendLayout;

BackendLayout layout(int rank, int size, int local_rank, int local_size, int cross_rank, int cross_size,
                     bool even) {
  return BackendLayout{rank, size, local_rank, local_size, cross_rank, cross_size, even};
}

}  // namespace

TEST(hosts_laid_out_evenly_needs_equal_consecutive_hosts) {
  using V = std::vector<std::string>;
  CHECK(ring::hosts_laid_out_evenly(V{}));
  CHECK(ring::hosts_laid_out_evenly(V{"a"}));
  CHECK(ring::hosts_laid_out_evenly(V{"a", "a", "b", "b", "c", "c"}));
  CHECK(ring::hosts_laid_out_evenly(V{"a", "b", "c"}));
  CHECK(!ring::hosts_laid_out_evenly(V{"a", "b", "b", "b", "c", "c"}));  // hosts of 1, 3 and 2 ranks
  CHECK(!ring::hosts_laid_out_evenly(V{"a", "a", "b"}));
  CHECK(!ring::hosts_laid_out_evenly(V{"a", "b", "a", "b"}));  // a host's ranks not consecutive
  CHECK(!ring::hosts_laid_out_evenly(V{"a", "a", "b", "b", "a", "a"}));
}

TEST(hierarchy_is_used_alike_on_every_rank_of_uneven_hosts) {
  // Hosts of 1, 3 and 2 ranks: ranks 4 and 5 alone look host by host from
  // their own sizes (2 x 3 hosts = 6 ranks); the job's hosts say no.
  const int auto_mode = -1;
  CHECK(!ring::hierarchy_used(auto_mode, layout(4, 6, 0, 2, 2, 3, false)));
  CHECK(!ring::hierarchy_used(auto_mode, layout(1, 6, 0, 3, 1, 3, false)));
  CHECK(ring::hierarchy_used(auto_mode, layout(3, 6, 1, 2, 1, 3, true)));
  CHECK(!ring::hierarchy_used(0, layout(3, 6, 1, 2, 1, 3, true)));
  CHECK(!ring::hierarchy_used(auto_mode, layout(1, 3, 1, 3, 0, 1, true)));  // one host
  CHECK(ring::hierarchy_used(1, layout(1, 3, 1, 3, 0, 1, true)));
}
