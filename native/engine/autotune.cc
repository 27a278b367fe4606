#include "engine/autotune.h"

#include <algorithm>

namespace ring {
namespace {

const size_t kThresholds[] = {1u << 20, 4u << 20, 16u << 20, 64u << 20};
const double kCycleTimes[] = {0.2, 0.5, 1.0, 2.5, 5.0};

}  // namespace

Autotuner::Autotuner(TuneParams start, double sample_seconds, int warmup, int scored, const std::string& log_path)
    : current_(start), best_(start), sample_seconds_(sample_seconds), warmup_(warmup), scored_(std::max(1, scored)) {
  candidates_.push_back(start);
  for (size_t t : kThresholds)
    if (t != start.fusion_threshold_bytes) candidates_.push_back({t, start.cycle_time_ms});
  if (!log_path.empty()) {
    log_ = std::fopen(log_path.c_str(), "w");
    if (log_) {
      std::fputs("trial,status,fusion_threshold_bytes,cycle_time_ms,bytes_per_second\n", log_);
      std::fflush(log_);
    }
  }
}

Autotuner::~Autotuner() {
  if (log_) std::fclose(log_);
}

void Autotuner::log(const char* what, const TuneParams& p, double score) {
  if (!log_) return;
  std::fprintf(log_, "%d,%s,%zu,%g,%.0f\n", trial_, what, p.fusion_threshold_bytes, p.cycle_time_ms, score);
  std::fflush(log_);
}

bool Autotuner::record(size_t bytes, Clock::time_point now) {
  if (settled_) return false;
  if (!started_) {
    started_ = true;
    window_start_ = now;
  }
  window_bytes_ += bytes;
  double elapsed = std::chrono::duration<double>(now - window_start_).count();
  if (elapsed < sample_seconds_) return false;
  double score = static_cast<double>(window_bytes_) / elapsed;
  window_bytes_ = 0;
  window_start_ = now;
  if (sample_++ < warmup_) return false;
  score_sum_ += score;
  if (sample_ < warmup_ + scored_) return false;
  double mean = score_sum_ / scored_;
  ++trial_;
  log("trial", current_, mean);
  if (mean > best_score_) {
    best_score_ = mean;
    best_ = current_;
  }
  next_candidate();
  return true;
}

void Autotuner::next_candidate() {
  sample_ = 0;
  score_sum_ = 0.0;
  if (++index_ < candidates_.size()) {
    current_ = candidates_[index_];
    return;
  }
  if (phase_ == 0) {  // thresholds done: cycle times with the best threshold
    phase_ = 1;
    candidates_.clear();
    for (double c : kCycleTimes)
      if (c != best_.cycle_time_ms) candidates_.push_back({best_.fusion_threshold_bytes, c});
    index_ = 0;
    if (!candidates_.empty()) {
      current_ = candidates_[0];
      return;
    }
  }
  settled_ = true;
  current_ = best_;
  log("settled", best_, best_score_);
}

}  // namespace ring
