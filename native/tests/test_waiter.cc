// How many CPUs a rank may count on (transport/waiter.h): what decides
// whether the engine's waits spin.
#include <string>
#include <vector>

#include "tests/harness.h"
#include "transport/waiter.h"

TEST(cpus_of_rank_counts_bound_ranks_by_their_own_cores) {
  // Disjoint masks (a launcher bound each rank to cores of its own): the
  // rank's own CPUs, however many the host has.
  CHECK_EQ(ring::cpus_of_rank("1", {"1", "2"}), 1.0);
  CHECK_EQ(ring::cpus_of_rank("f0", {"f", "f0"}), 4.0);
  // Shared CPUs: those covered, over the ranks sharing them.
  CHECK_EQ(ring::cpus_of_rank("3", {"3", "3"}), 1.0);
  CHECK_EQ(ring::cpus_of_rank("1", {"1", "1"}), 0.5);
  CHECK_EQ(ring::cpus_of_rank("3", {"3", "6"}), 1.5);
  CHECK_EQ(ring::cpus_of_rank("1000000000000000000", {"1000000000000000000", "1"}), 1.0);
  // An unreadable mask: the estimate from this process's affinity.
  CHECK_EQ(ring::cpus_of_rank("", {"", "1"}), ring::cpus_per_rank(2));
  // This process's own mask reads back as its affinity.
  const std::string mine = ring::affinity_mask();
  CHECK(!mine.empty());
  CHECK_EQ(ring::cpus_of_rank(mine, {mine}), ring::cpus_per_rank(1));
}
