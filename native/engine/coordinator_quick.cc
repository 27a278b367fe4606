// The coordinator's agreed cached allreduces (see coordinator.h): a cache
// id whose every rank's signature was validated together, and has not
// changed since, is "agreed"; its bits are counted per id and, once every
// rank sent one, become an Execute response built from rank 0's signature.
//
// Whatever could make a counted tensor need the table sends it there, with
// the bits counted so far (demote): a request for the name that is not its
// sender's signature (the coordinator then no longer knows the ranks agree),
// a rank that joins, a timeline that records. Validation in the table
// (Coordinator::take) makes an id agreed again when every rank's request
// there is its signature.
#include <algorithm>

#include "common/error.h"
#include "engine/coordinator.h"

namespace ring {

std::vector<int> Coordinator::Quick::missing() const {
  std::vector<int> out;
  for (int r = 0; r < static_cast<int>(by_rank.size()); ++r)
    if (!by_rank[r]) out.push_back(r);
  return out;
}

void Coordinator::Quick::clear() {
  ready = false;
  count = 0;
  std::fill(by_rank.begin(), by_rank.end(), 0);
}

Coordinator::Quick& Coordinator::quick(uint32_t id) {
  while (quick_.size() <= id) {
    quick_.emplace_back();
    quick_.back().by_rank.assign(world_size_, 0);
  }
  return quick_[id];
}

void Coordinator::add_local(int rank, const Request& req, long long timeline_us) {
  const int64_t id = cache_->id_of(req.name);
  if (id >= 0) {
    const uint32_t cid = static_cast<uint32_t>(id);
    const Request* sig = cache_->signature(cid, rank);
    if (sig && *sig == req) return add_cached(rank, cid, timeline_us);
    cache_->set_signature(cid, rank, req);
    quick(cid).agreed = false;
  }
  add_known(rank, req, timeline_us, id);
}

void Coordinator::add_cached(int rank, uint32_t id, long long timeline_us) {
  const Request* sig = cache_->signature(id, rank);
  if (!sig)
    throw_error(ErrorKind::Internal,
                "rank " + std::to_string(rank) + " sent response-cache bit " + std::to_string(id) + " it never cached");
  Quick& k = quick(id);
  const bool counted = k.agreed && !k.tabled && join_count_ == 0 && sig->op == OpType::Allreduce &&
                       sig->process_set == 0 && !(timeline_ && timeline_->active());
  if (!counted) return add_known(rank, *sig, timeline_us, id);
  if (k.by_rank[rank])
    throw_error(ErrorKind::Internal, "rank " + std::to_string(rank) + " submitted '" + sig->name + "' twice");
  if (k.count == 0) {
    k.since = coarse_now();
    quick_open_.push_back(id);
  }
  k.by_rank[rank] = 1;
  if (++k.count < world_size_) return;
  k.ready = true;
  quick_ready_.push_back(id);
  count_ready(*sig);
}

void Coordinator::demote(uint32_t id, Pending& p) {
  Quick& k = quick(id);
  k.tabled = true;
  if (k.count == 0) return;
  if (k.ready) throw_error(ErrorKind::Internal, "'" + cache_->name_of(id) + "' submitted twice");
  p.since = k.since;
  for (int r = 0; r < world_size_; ++r) {
    if (!k.by_rank[r]) continue;
    p.by_rank[r] = *cache_->signature(id, r);
    ++p.count;
  }
  k.clear();
  quick_open_.erase(std::find(quick_open_.begin(), quick_open_.end(), id));
}

void Coordinator::note_agreement(const Pending& p) {
  if (p.cache_id < 0) return;
  const uint32_t id = static_cast<uint32_t>(p.cache_id);
  bool agreed = p.set && p.set->id == 0 && p.count == world_size_;
  for (int r = 0; agreed && r < world_size_; ++r) {
    const Request* sig = cache_->signature(id, r);
    agreed = sig && p.by_rank[r] && *sig == *p.by_rank[r];
  }
  quick(id).agreed = agreed;
}

void Coordinator::take_quick(ResponseList& list, std::vector<OpenFusion>& open) {
  if (quick_ready_.empty()) return;
  for (uint32_t id : quick_ready_) {
    schedule(cache_->name_of(id), *cache_->signature(id, 0), nullptr, Timeline::Row{}, list, open);
    quick_[id].clear();
  }
  quick_ready_.clear();
  quick_open_.erase(
      std::remove_if(quick_open_.begin(), quick_open_.end(), [&](uint32_t id) { return quick_[id].count == 0; }),
      quick_open_.end());
}

void Coordinator::quick_stalls(Clock::time_point now, double older_than, std::vector<Stall>& out) const {
  for (uint32_t id : quick_open_) {
    const Quick& k = quick_[id];
    const double age = std::chrono::duration<double>(now - k.since).count();
    if (k.ready || age < older_than) continue;
    const char* op = "unknown";
    for (size_t r = 0; r < k.by_rank.size(); ++r) {
      const Request* sig = k.by_rank[r] ? cache_->signature(id, static_cast<int>(r)) : nullptr;
      if (sig) {
        op = op_type_name(sig->op);
        break;
      }
    }
    out.push_back(Stall{cache_->name_of(id), k.missing(), age, op});
  }
}

void Coordinator::fail_quick(ResponseList& list) {
  for (uint32_t id : quick_open_) {
    Quick& k = quick_[id];
    if (!k.ready) {
      std::string ranks;
      for (int r : k.missing()) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
      list.responses.push_back(unfinished_error(cache_->name_of(id), ranks));
    }
    k.clear();
  }
  quick_open_.clear();
  quick_ready_.clear();
}

}  // namespace ring
