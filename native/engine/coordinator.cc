#include "engine/coordinator.h"

#include <time.h>

#include <algorithm>

#include "common/error.h"
#include "engine/agreement.h"

namespace ring {

namespace {

std::shared_ptr<const ProcessSet> every_rank(int world_size) {
  auto set = std::make_shared<ProcessSet>();
  for (int r = 0; r < world_size; ++r) set->ranks.push_back(r);
  return set;
}

}  // namespace

Coordinator::Clock::time_point Coordinator::coarse_now() {
#ifdef CLOCK_MONOTONIC_COARSE
  // The same clock as steady_clock's (CLOCK_MONOTONIC), at tick resolution.
  timespec ts;
  if (clock_gettime(CLOCK_MONOTONIC_COARSE, &ts) == 0)
    return Clock::time_point(std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec));
#endif
  return Clock::now();
}

Coordinator::Coordinator(int world_size, ResponseCache* cache, size_t fusion_threshold_bytes)
    : world_size_(world_size),
      global_(every_rank(world_size)),
      cache_(cache),
      fusion_threshold_(fusion_threshold_bytes),
      joined_(world_size, false) {}

const Request& Coordinator::Pending::first() const {
  for (const auto& q : by_rank)
    if (q) return *q;
  throw_error(ErrorKind::Internal, "pending tensor without any request");
}

std::vector<int> Coordinator::missing(const Pending& p) const {
  std::vector<int> out;
  if (!p.set) return out;
  const bool global = p.set->id == 0;
  for (int r : p.set->ranks)
    if (!p.by_rank[r] && !(global && joined_[r])) out.push_back(r);
  return out;
}

bool Coordinator::complete(const Pending& p) const {
  if (!p.set) return true;
  const bool global = p.set->id == 0;
  for (int r : p.set->ranks)
    if (!p.by_rank[r] && !(global && joined_[r])) return false;
  return true;
}

std::shared_ptr<const ProcessSet> Coordinator::find_set(const Request& req, std::string* error) const {
  auto set = req.process_set == 0 ? global_ : sets_ ? sets_->find(req.process_set) : nullptr;
  if (!set)
    *error = std::string(op_type_name(req.op)) + " of tensor '" + req.name + "': process set " +
             std::to_string(req.process_set) +
             " is not registered on rank 0 (add it on every rank, and remove it only when no rank uses it)";
  return set;
}

void Coordinator::mark_ready(const std::string& name, Pending& p) {
  p.ready = true;
  ready_.push_back(name);
  count_ready(p.first());
}

void Coordinator::count_ready(const Request& q) {
  const size_t bytes = static_cast<size_t>(q.num_elements()) * dtype_size(q.dtype);
  ready_bytes_ += bytes;
  if (q.op == OpType::Allreduce && bytes >= alone_bytes_) ready_alone_ = true;
}

void Coordinator::join(int rank) {
  if (joined_[rank])
    throw_error(ErrorKind::Internal, "rank " + std::to_string(rank) + " joined twice");
  joined_[rank] = true;
  ++join_count_;
  last_joined_ = rank;
  // Counted tensors go through the table while a rank has joined.
  std::vector<uint32_t> counted;
  for (uint32_t id : quick_open_)
    if (!quick_[id].ready) counted.push_back(id);
  for (uint32_t id : counted) open_entry(cache_->name_of(id), id)->second.set = global_;
  // Tensors that only this rank was missing are ready now.
  for (const std::string& name : arrival_) {
    Pending& p = table_.at(name);
    if (!p.by_rank[rank] && p.count > 0 && !p.ready && complete(p)) mark_ready(name, p);
  }
}

void Coordinator::add(int rank, const RequestList& list) {
  const long long ts = timeline_ ? timeline_->now() : -1;  // one time stamp for the list
  for (size_t byte = 0; byte < list.cache_bits.size(); ++byte) {
    if (!list.cache_bits[byte]) continue;
    for (int bit = 0; bit < 8; ++bit) {
      if (!(list.cache_bits[byte] & (1u << bit))) continue;
      add_cached(rank, static_cast<uint32_t>(byte * 8 + bit), ts);
    }
  }
  for (const auto& req : list.requests) {
    int64_t id = cache_->id_of(req.name);
    if (id >= 0) {
      cache_->set_signature(static_cast<uint32_t>(id), rank, req);
      quick(static_cast<uint32_t>(id)).agreed = false;
    }
    add_known(rank, req, ts, id);
  }
  if (list.shutdown) request_shutdown(rank);
}

std::unordered_map<std::string, Coordinator::Pending>::iterator Coordinator::insert_pending(const std::string& name) {
  auto node = spare_.take();
  if (node.empty()) {
    auto it = table_.emplace(name, Pending{}).first;
    it->second.by_rank.resize(world_size_);
    return it;
  }
  node.key() = name;
  node.mapped().since = coarse_now();  // first submission: now, not when the node was retired
  return table_.insert(std::move(node)).position;
}

void Coordinator::retire_pending(const std::string& name) {
  auto node = table_.extract(name);
  if (node.empty()) return;
  if (node.mapped().cache_id >= 0) quick(static_cast<uint32_t>(node.mapped().cache_id)).tabled = false;
  if (!spare_.has_room()) return;
  std::vector<std::optional<Request>> rows = std::move(node.mapped().by_rank);
  for (auto& row : rows) row.reset();
  node.mapped() = Pending{};  // every other field as new
  node.mapped().by_rank = std::move(rows);
  spare_.keep(std::move(node));
}

std::unordered_map<std::string, Coordinator::Pending>::iterator Coordinator::open_entry(const std::string& name,
                                                                                      int64_t cache_id) {
  auto it = insert_pending(name);
  arrival_.push_back(name);
  it->second.cache_id = cache_id;
  if (cache_id >= 0) demote(static_cast<uint32_t>(cache_id), it->second);
  return it;
}

void Coordinator::add_request(int rank, const Request& req, long long timeline_us) {
  add_known(rank, req, timeline_us, cache_->id_of(req.name));
}

void Coordinator::add_known(int rank, const Request& req, long long timeline_us, int64_t cache_id) {
  if (req.op == OpType::Join) {
    join_name_ = req.name;
    join(rank);
    return;
  }
  auto it = table_.find(req.name);
  const bool first = it == table_.end();
  if (first) {
    it = open_entry(req.name, cache_id);
    it->second.set = find_set(req, &it->second.error);
  }
  if (timeline_) timeline_->rank_ready(req.name, &it->second.timeline_row, req.op, rank, first, timeline_us);
  Pending& p = it->second;
  if (p.by_rank[rank])
    throw_error(ErrorKind::Internal, "rank " + std::to_string(rank) + " submitted '" + req.name + "' twice");
  p.by_rank[rank] = req;
  ++p.count;
  if (p.set && !p.set->contains(rank)) {
    p.error = std::string(op_type_name(req.op)) + " of tensor '" + req.name + "': " + rank_name(rank) +
              " is not a member of process set " + std::to_string(p.set->id);
    p.set = nullptr;
  }
  if (!p.ready && complete(p)) mark_ready(req.name, p);
}

void Coordinator::request_shutdown(int rank) {
  if (shutdown_rank_ < 0) shutdown_rank_ = rank;
}

std::vector<Coordinator::Stall> Coordinator::stalled(Clock::time_point now, double older_than) const {
  std::vector<Stall> out;
  for (const std::string& name : arrival_) {
    const Pending& p = table_.at(name);
    double age = std::chrono::duration<double>(now - p.since).count();
    if (age < older_than || complete(p)) continue;
    out.push_back(Stall{name, missing(p), age, op_type_name(p.first().op)});
  }
  if (quick_open_.size() > quick_ready_.size()) {
    quick_stalls(now, older_than, out);
    std::stable_sort(out.begin(), out.end(), [](const Stall& a, const Stall& b) { return a.seconds > b.seconds; });
  }
  return out;
}

void Coordinator::fail_stalled(const std::string& reason) {
  stall_reason_ = reason;
  if (shutdown_rank_ < 0) shutdown_rank_ = 0;
}

std::string Coordinator::validate(const std::string& name, const Pending& p) const {
  if (!p.error.empty()) return p.error;
  const auto& q = p.by_rank;
  const Request& first = p.first();
  if (p.count < p.set->size() && first.op != OpType::Allreduce) {
    std::string ranks;
    for (int r : p.set->ranks)
      if (!q[r]) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    return std::string(op_type_name(first.op)) + " of tensor '" + name + "' while rank(s) " + ranks +
           " have joined: only allreduce works until every rank has joined";
  }
  return disagreement(name, q);
}

Response Coordinator::execute_response(const std::string& name, const Request& first, const Pending* p) const {
  Response r;
  r.kind = ResponseKind::Execute;
  r.op = first.op;
  r.names.push_back(name);
  r.dtype = first.dtype;
  r.reduce_op = first.reduce_op;
  r.prescale = first.prescale;
  r.postscale = first.postscale;
  r.device = first.device;
  r.process_set = first.process_set;
  if (r.op == OpType::Allreduce) {
    r.sizes.push_back(first.num_elements());
  } else if (r.op == OpType::Allgather) {
    for (int m : p->set->ranks) r.sizes.push_back(p->by_rank[m]->shape.empty() ? 1 : p->by_rank[m]->shape[0]);
  } else if (r.op == OpType::Alltoall) {
    for (int m : p->set->ranks)
      r.sizes.insert(r.sizes.end(), p->by_rank[m]->splits.begin(), p->by_rank[m]->splits.end());
  }
  return r;
}

Response Coordinator::error_response(const std::string& name, const Pending& p, const std::string& err) const {
  Response r;
  r.kind = ResponseKind::Error;
  r.op = p.first().op;
  r.names.push_back(name);
  r.error_kind = err.rfind("Mismatched", 0) == 0 ? ErrorKind::Mismatch : ErrorKind::BadArgument;
  r.error = err;
  return r;
}

void Coordinator::cache(const std::string& name, const Pending& p, ResponseList& list) {
  if (cache_->id_of(name) >= 0 || cache_->full() || p.count < p.set->size()) return;
  uint32_t id = static_cast<uint32_t>(cache_->size());
  cache_->put(name, id);
  for (int rank : p.set->ranks) cache_->set_signature(id, rank, *p.by_rank[rank]);
  quick(id).agreed = p.set->id == 0;  // validated, and every rank's request is its signature
  list.cache_puts.push_back({name, id});
}

void Coordinator::schedule(const std::string& name, const Request& q, const Pending* p, Timeline::Row row,
                           ResponseList& list, std::vector<OpenFusion>& open) const {
  const size_t bytes = static_cast<size_t>(q.num_elements()) * dtype_size(q.dtype);
  const bool fusable = q.op == OpType::Allreduce && bytes < alone_bytes_;
  auto same_key = [&](const OpenFusion& g) { return same_fusion_key(*g.key, q); };
  auto it = fusable ? std::find_if(open.begin(), open.end(), same_key) : open.end();
  if (fusable && it != open.end() && it->bytes + bytes <= fusion_threshold_) {
    Response& fused = list.responses[it->index];
    fused.names.push_back(name);
    fused.sizes.push_back(q.num_elements());
    fused.timeline_rows.push_back(row.id);
    if (fused.timeline_file != row.file) fused.timeline_file = 0;  // rows of two files
    it->bytes += bytes;
    return;
  }
  if (fusable) {  // the open response of its fusion key from now on
    if (it == open.end()) it = open.insert(open.end(), OpenFusion{});
    *it = OpenFusion{&q, list.responses.size(), bytes};
  }
  list.responses.push_back(execute_response(name, q, p));
  list.responses.back().timeline_rows.push_back(row.id);
  list.responses.back().timeline_file = row.file;
}

Response Coordinator::join_response() {
  Response r;
  r.op = OpType::Join;
  r.names.push_back(join_name_);
  r.sizes.push_back(last_joined_);
  std::fill(joined_.begin(), joined_.end(), false);
  join_count_ = 0;
  return r;
}

ResponseList Coordinator::take() {
  ResponseList list;
  std::vector<OpenFusion> open;  // one per fusion key seen in this list
  const long long ts = timeline_ ? timeline_->now() : -1;
  for (const std::string& name : ready_) {
    Pending& p = table_.at(name);
    if (timeline_) timeline_->negotiate_end(name, &p.timeline_row, ts);
    std::string err = validate(name, p);
    if (!err.empty()) {
      list.responses.push_back(error_response(name, p, err));
      continue;
    }
    note_agreement(p);
    cache(name, p, list);
    schedule(name, p.first(), &p, p.timeline_row, list, open);
  }
  for (const std::string& name : ready_) retire_pending(name);
  take_quick(list, open);
  ready_.clear();
  ready_bytes_ = 0;
  ready_alone_ = false;
  arrival_.erase(std::remove_if(arrival_.begin(), arrival_.end(), [&](const std::string& n) { return !table_.count(n); }),
                 arrival_.end());
  if (join_count_ == world_size_) list.responses.push_back(join_response());
  if (shutdown_rank_ >= 0) fail_unfinished(list);
  return list;
}

std::string Coordinator::rank_name(int rank) const {
  return rank < static_cast<int>(rank_names_.size()) ? rank_names_[rank] : "rank " + std::to_string(rank);
}

void Coordinator::fail_unfinished(ResponseList& list) {
  list.shutdown = true;
  list.shutdown_reason = stall_reason_.empty() ? rank_name(shutdown_rank_) + " called shutdown()" : stall_reason_;
  if (stall_reason_.empty()) list.shutdown_rank = shutdown_rank_;
  else list.shutdown_kind = ErrorKind::Timeout;
  for (const std::string& name : arrival_) {
    const Pending& p = table_.at(name);
    std::string ranks;
    if (p.set)
      for (int r : p.set->ranks)
        if (!p.by_rank[r]) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    list.responses.push_back(unfinished_error(name, ranks));
  }
  table_.clear();
  arrival_.clear();
  fail_quick(list);
}

Response Coordinator::unfinished_error(const std::string& name, const std::string& missing_ranks) const {
  Response r;
  r.kind = ResponseKind::Error;
  r.names.push_back(name);
  // A rank that leaves while others wait for it is a lost peer to them.
  r.error_kind = stall_reason_.empty() ? ErrorKind::PeerFailure : ErrorKind::Timeout;
  r.error = stall_reason_.empty() ? "lost " + rank_name(shutdown_rank_) +
                                        ": it left the job (called shutdown()) while tensor '" + name +
                                        "' was never submitted by rank(s) " + missing_ranks
                                  : stall_reason_;
  return r;
}

}  // namespace ring
