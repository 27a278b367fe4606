#include "engine/stall_inspector.h"

#include "common/log.h"

namespace ring {
namespace {

constexpr double kPollSeconds = 0.2;
constexpr size_t kStallsNamed = 10;

double seconds_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

std::string describe_stalls(const std::vector<Coordinator::Stall>& stalls) {
  std::string text;
  for (size_t i = 0; i < stalls.size() && i < kStallsNamed; ++i) {
    const auto& s = stalls[i];
    text += (i ? "; '" : "'") + s.name + "' (" + s.op + ", " + std::to_string(static_cast<long>(s.seconds)) +
            " s, not submitted by rank";
    text += s.missing.size() > 1 ? "s " : " ";
    for (size_t k = 0; k < s.missing.size(); ++k) text += (k ? ", " : "") + std::to_string(s.missing[k]);
    text += ")";
  }
  if (stalls.size() > kStallsNamed) text += "; and " + std::to_string(stalls.size() - kStallsNamed) + " more";
  return text;
}

void StallInspector::inspect(Coordinator& coord, Clock::time_point now) {
  if ((check_s_ <= 0 && shutdown_s_ <= 0) || seconds_between(last_check_, now) < kPollSeconds) return;
  last_check_ = now;
  if (shutdown_s_ > 0 && !coord.stalled(now, shutdown_s_).empty()) {
    // The job ends for every tensor still waiting for some rank, so the
    // error names all of them, also those stalled for less time so far.
    coord.fail_stalled("stalled for more than " + std::to_string(static_cast<long>(shutdown_s_)) +
                       " s (RING_STALL_SHUTDOWN_TIME_SECONDS): " + describe_stalls(coord.stalled(now, 0)));
    return;
  }
  if (check_s_ <= 0 || seconds_between(last_warning_, now) < check_s_) return;
  auto stalls = coord.stalled(now, check_s_);
  if (stalls.empty()) return;
  last_warning_ = now;
  log_line(LogLevel::Warning,
           "stall: tensors submitted by some ranks but not by others for more than " +
               std::to_string(static_cast<long>(check_s_)) +
               " s (RING_STALL_CHECK_TIME_SECONDS); a rank may be stuck, or the ranks took different paths "
               "through the program: " + describe_stalls(stalls));
}

}  // namespace ring
