#include "engine/executor.h"

#include <algorithm>
#include <chrono>

namespace ring {

bool Executor::serves(const Device& device) const {
  for (const auto& b : backends_)
    if (b->serves(device)) return true;
  return false;
}

bool Executor::prepare(Entry& e, uint64_t stream) {
  for (const auto& b : backends_) {
    if (!b->serves(e.req.device)) continue;
    b->prepare(e, stream);
    return true;
  }
  return false;
}

void Executor::settle(double timeout_seconds) {
  const auto start = std::chrono::steady_clock::now();
  for (const auto& b : backends_) {
    const double spent = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    b->settle(std::max(0.0, timeout_seconds - spent));
  }
}

Backend& Executor::backend_for(const Response& r) {
  for (const auto& b : backends_)
    if (b->enabled(r)) return *b;
  throw_error(ErrorKind::Internal, std::string("no backend runs ") + op_type_name(r.op) + " on device " +
                                       device_name(r.device));
}

Entry Executor::stand_in(const Response& r, size_t i) {
  Entry e;
  e.req.name = r.names[i];
  e.req.op = OpType::Allreduce;
  e.req.dtype = r.dtype;
  e.req.reduce_op = r.reduce_op;
  e.req.prescale = r.prescale;
  e.req.postscale = r.postscale;
  e.req.device = r.device;
  e.req.shape = {i < r.sizes.size() ? r.sizes[i] : 0};
  return e;
}

void Executor::run(const Response& r, std::unordered_map<std::string, Entry>& pending) {
  try {
    run_response(r, pending);
  } catch (const RingError& e) {
    if (r.kind == ResponseKind::Error || r.names.empty()) throw;
    std::string what = std::string(e.what()) + "; during " + op_type_name(r.op) + " of tensor '" + r.names[0] + "'";
    if (r.names.size() > 1) what += " and " + std::to_string(r.names.size() - 1) + " more fused with it";
    throw RingError(e.kind(), what);
  }
}

void Executor::run_response(const Response& r, std::unordered_map<std::string, Entry>& pending) {
  entries_.clear();
  // Members of a set submit every tensor of its responses before rank 0
  // schedules them; a rank without the first one is not a member.
  if (r.process_set != 0 && r.kind == ResponseKind::Execute && !r.names.empty() && !pending.count(r.names[0])) return;
  for (size_t i = 0; i < r.names.size(); ++i) {
    const std::string& name = r.names[i];
    auto node = pending.extract(name);
    if (node.empty()) {
      if (r.kind == ResponseKind::Error) continue;  // e.g. a shutdown error for a tensor only others have
      if (joined_ && r.op == OpType::Allreduce && r.process_set == 0) {
        entries_.push_back(stand_in(r, i));
        continue;
      }
      throw_error(ErrorKind::Internal, "coordinator scheduled '" + name + "', which this rank never submitted");
    }
    entries_.push_back(std::move(node.mapped()));
    spare_.keep(std::move(node));
  }
  if (r.kind == ResponseKind::Error) {
    for (auto& e : entries_) handles_->fail(e.handle, r.error_kind, r.error);
    return;
  }
  backend_for(r).execute(r, entries_);
  if (r.op == OpType::Join) joined_ = false;
}

}  // namespace ring
