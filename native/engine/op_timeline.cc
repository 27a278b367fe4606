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

OpTimeline::Deferred OpTimeline::defer(const std::vector<Entry>& entries, const char* phase) {
  Deferred d;
  if (rows_.empty()) return d;
  d.timeline = timeline_;
  d.rows.swap(rows_);
  for (const auto& e : entries) d.requests.push_back(e.req);
  d.phase = phase;
  d.began = timeline_->now();
  return d;
}

void OpTimeline::finish(const Deferred& d) {
  if (d.rows.empty()) return;
  d.timeline->span(d.rows, d.phase, d.began);
  std::vector<const Request*> requests;
  for (const auto& q : d.requests) requests.push_back(&q);
  d.timeline->end_ops(d.rows, requests);
}

}  // namespace ring
