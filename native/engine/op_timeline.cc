#include "engine/op_timeline.h"

namespace ring {

void OpTimeline::open(const std::vector<Entry>& entries, const Response& r) {
  rows_.clear();
  if (!timeline_ || !timeline_->active()) return;
  names_.clear();
  for (const auto& e : entries) names_.push_back(&e.req.name);
  timeline_->rows(names_, r.timeline_rows, r.timeline_file, &rows_);
  if (!rows_.empty()) timeline_->begin(rows_, op_phase(r.op));
}

void OpTimeline::phase_begin(const char* phase) {
  if (rows_.empty()) return;
  phase_ = phase;
  phase_began_ = timeline_->now();
}

void OpTimeline::phase_end() {
  if (!rows_.empty()) timeline_->span(rows_, phase_, phase_began_);
}

void OpTimeline::close(const std::vector<Entry>& entries) {
  if (rows_.empty()) return;
  requests_.clear();
  for (const auto& e : entries) requests_.push_back(&e.req);
  timeline_->end_ops(rows_, requests_);
}

}  // namespace ring
