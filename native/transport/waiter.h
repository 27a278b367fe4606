// Backoff: how a blocked Mesh call waits without burning a core. It spins
// for a few microseconds (latency), then yields (another rank may need this
// core), then sleeps with a growing interval capped at 1 ms. On an
// oversubscribed host (set_spin(false)) it skips the spin: a spinning waiter
// only takes the core from the peer it waits for.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace ring {

class Backoff {
 public:
  // Called after an iteration that moved bytes.
  void reset() { idle_since_valid_ = false; }
  // Called after an iteration that moved nothing; waits a little.
  void wait();
  // Seconds since the last reset().
  double idle_seconds() const;
  // True once waiting should block in the kernel (a futex, poll()) rather
  // than spin or yield: at once on an oversubscribed host (no spin), after
  // kYieldSeconds otherwise. Starts the idle clock.
  bool blocking_due();
  static constexpr double kYieldSeconds = 500e-6;
  // Whether waits start with a spin (process-wide; on by default).
  static void set_spin(bool on);

 private:
  using Clock = std::chrono::steady_clock;
  // The idle time counts from the first wait after a reset().
  void start_idle_clock();
  bool idle_since_valid_ = false;
  Clock::time_point idle_since_;
  long idle_iterations_ = 0;
};

// The CPUs this process may run on (its affinity), divided by the
// `local_size` ranks of its host: the estimate before the ranks of a host
// have compared their affinities (cpus_of_rank).
double cpus_per_rank(int local_size);

// This process's affinity as hex digits, the lowest CPUs last ("3": CPUs
// 0 and 1); "" when it cannot be read.
std::string affinity_mask();

// The CPUs a rank may count on, from the affinity_mask() of every rank of
// its host (`local`, its own `mine` among them): its own CPUs when the
// masks are pairwise disjoint (a launcher bound each rank to cores of its
// own, as mpirun does), else all the CPUs they cover divided by how many
// ranks share them. Unreadable masks fall back to cpus_per_rank().
double cpus_of_rank(const std::string& mine, const std::vector<std::string>& local);

// Seconds from `t` until now.
inline double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace ring
