// StallInspector: rank 0's watch over tensors that some ranks submitted and
// others have not (usually ranks that took different paths through the
// program, or a rank that is stuck).
//
//   RING_STALL_CHECK_TIME_SECONDS     a warning naming the tensors stalled
//                                     that long and the ranks missing, at
//                                     most once per that period;
//   RING_STALL_SHUTDOWN_TIME_SECONDS  once a tensor has stalled that long,
//                                     the job ends (Coordinator::fail_stalled)
//                                     with an error naming every tensor
//                                     still waiting for some rank.
// 0 turns either off. It looks at the coordinator at most every 0.2 s.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "engine/coordinator.h"

namespace ring {

class StallInspector {
 public:
  StallInspector(double check_seconds, double shutdown_seconds)
      : check_s_(check_seconds), shutdown_s_(shutdown_seconds) {}

  // Warns about, or fails, what `coord` has stalled (caller: rank 0's
  // progress step, `now` the time it started).
  void inspect(Coordinator& coord, std::chrono::steady_clock::time_point now);

 private:
  using Clock = std::chrono::steady_clock;
  double check_s_, shutdown_s_;
  Clock::time_point last_check_{}, last_warning_{};
};

// "'a' (allreduce, 12 s, not submitted by rank 1); 'b' (...)", the first
// ten: the ranks not named submitted it and wait in that collective.
std::string describe_stalls(const std::vector<Coordinator::Stall>& stalls);

}  // namespace ring
