// Autotuner: online tuning of the fusion threshold and the cycle time from
// the throughput the job actually gets (RING_AUTOTUNE=1). It runs on rank 0
// only: both knobs act only in the coordinator (which tensors to fuse, how
// long to gather a batch), so no other rank needs to know them.
//
// The search is coordinate descent over a few values: first the fusion
// threshold (with the starting cycle time), then the cycle time (with the
// best threshold). Each candidate runs for `warmup` samples that are
// discarded (the pipeline adapts) and `scored` samples of at least
// `sample_seconds` each; its score is the mean of bytes scheduled per second
// over its scored samples. Then the tuner settles on the best candidate and
// stops changing anything. Every scored candidate and the final choice are
// appended to a CSV log (RING_AUTOTUNE_LOG) when one is given.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <string>
#include <vector>

namespace ring {

struct TuneParams {
  size_t fusion_threshold_bytes;
  double cycle_time_ms;
};

class Autotuner {
 public:
  using Clock = std::chrono::steady_clock;
  Autotuner(TuneParams start, double sample_seconds, int warmup, int scored, const std::string& log_path);
  ~Autotuner();

  // Counts `bytes` of work scheduled at `now`; true when params() changed.
  bool record(size_t bytes, Clock::time_point now);
  TuneParams params() const { return current_; }
  bool settled() const { return settled_; }

 private:
  void next_candidate();
  void log(const char* what, const TuneParams& p, double score);

  std::vector<TuneParams> candidates_;
  size_t index_ = 0;
  int phase_ = 0;  // 0: thresholds, 1: cycle times
  TuneParams current_, best_;
  double best_score_ = -1.0;
  double sample_seconds_;
  int warmup_, scored_;
  int sample_ = 0;        // of the current candidate
  double score_sum_ = 0.0;
  int trial_ = 0;
  size_t window_bytes_ = 0;
  Clock::time_point window_start_;
  bool started_ = false, settled_ = false;
  std::FILE* log_ = nullptr;
};

}  // namespace ring
