#include "engine/coordinator.h"

#include <algorithm>
#include <sstream>
#include <tuple>

#include "common/error.h"

namespace ring {
namespace {

std::string shape_str(const std::vector<int64_t>& v) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
  os << "]";
  return os.str();
}

std::string num_str(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

// Compares one field across ranks; returns the error text or "".
// Joined ranks (no request) are left out.
template <class Field>
std::string compare(const std::string& name, const char* field, const std::vector<std::optional<Request>>& reqs,
                    Field get) {
  std::vector<std::string> values(reqs.size());
  std::string first;
  bool differ = false, seen = false;
  for (size_t r = 0; r < reqs.size(); ++r) {
    if (!reqs[r]) continue;
    values[r] = get(*reqs[r]);
    if (!seen) first = values[r];
    seen = true;
    differ |= values[r] != first;
  }
  if (!differ) return "";
  return std::string("Mismatched ") + field + " for tensor '" + name + "': " + describe_disagreement(values);
}

std::vector<int64_t> tail_dims(const std::vector<int64_t>& shape) {
  return shape.empty() ? shape : std::vector<int64_t>(shape.begin() + 1, shape.end());
}

}  // namespace

std::string describe_disagreement(const std::vector<std::string>& values_by_rank) {
  // Group ranks by value, in order of first appearance.
  std::vector<std::pair<std::string, std::vector<int>>> groups;
  for (int r = 0; r < static_cast<int>(values_by_rank.size()); ++r) {
    if (values_by_rank[r].empty()) continue;  // a joined rank
    auto it = std::find_if(groups.begin(), groups.end(), [&](auto& g) { return g.first == values_by_rank[r]; });
    if (it == groups.end()) groups.push_back({values_by_rank[r], {r}});
    else it->second.push_back(r);
  }
  std::ostringstream os;
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto& ranks = groups[g].second;
    os << (g ? "; " : "") << (ranks.size() > 1 ? "ranks " : "rank ");
    for (size_t i = 0; i < ranks.size(); ++i) os << (i ? ", " : "") << ranks[i];
    os << ": " << groups[g].first;
  }
  return os.str();
}

Coordinator::Coordinator(int world_size, ResponseCache* cache, size_t fusion_threshold_bytes)
    : world_size_(world_size), cache_(cache), fusion_threshold_(fusion_threshold_bytes), joined_(world_size, false) {}

const Request& Coordinator::Pending::first() const {
  for (const auto& q : by_rank)
    if (q) return *q;
  throw_error(ErrorKind::Internal, "pending tensor without any request");
}

bool Coordinator::complete(const Pending& p) const {
  for (size_t r = 0; r < p.by_rank.size(); ++r)
    if (!p.by_rank[r] && !joined_[r]) return false;
  return true;
}

void Coordinator::mark_ready(const std::string& name, const Pending& p) {
  ready_.push_back(name);
  const Request& q = p.first();
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
  // Tensors that only this rank was missing are ready now.
  for (const std::string& name : arrival_) {
    const Pending& p = table_.at(name);
    if (!p.by_rank[rank] && p.count > 0 && complete(p) &&
        std::find(ready_.begin(), ready_.end(), name) == ready_.end())
      mark_ready(name, p);
  }
}

void Coordinator::add(int rank, const RequestList& list) {
  const long long ts = timeline_ ? timeline_->now() : -1;  // one time stamp for the list
  for (size_t byte = 0; byte < list.cache_bits.size(); ++byte) {
    if (!list.cache_bits[byte]) continue;
    for (int bit = 0; bit < 8; ++bit) {
      if (!(list.cache_bits[byte] & (1u << bit))) continue;
      uint32_t id = static_cast<uint32_t>(byte * 8 + bit);
      const Request* sig = cache_->signature(id, rank);
      if (!sig)
        throw_error(ErrorKind::Internal,
                    "rank " + std::to_string(rank) + " sent response-cache bit " + std::to_string(id) + " it never cached");
      add_request(rank, *sig, ts);
    }
  }
  for (const auto& req : list.requests) {
    int64_t id = cache_->id_of(req.name);
    if (id >= 0) cache_->set_signature(static_cast<uint32_t>(id), rank, req);
    add_request(rank, req, ts);
  }
  if (list.shutdown) request_shutdown(rank);
}

void Coordinator::add_request(int rank, const Request& req, long long timeline_us) {
  if (req.op == OpType::Join) {
    join_name_ = req.name;
    join(rank);
    return;
  }
  auto it = table_.find(req.name);
  const bool first = it == table_.end();
  if (first) {
    it = table_.emplace(req.name, Pending{}).first;
    it->second.by_rank.resize(world_size_);
    arrival_.push_back(req.name);
  }
  if (timeline_) timeline_->rank_ready(req.name, &it->second.timeline_row, req.op, rank, first, timeline_us);
  Pending& p = it->second;
  if (p.by_rank[rank])
    throw_error(ErrorKind::Internal, "rank " + std::to_string(rank) + " submitted '" + req.name + "' twice");
  p.by_rank[rank] = req;
  ++p.count;
  if (complete(p)) mark_ready(req.name, p);
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
    Stall s{name, {}, age};
    for (int r = 0; r < world_size_; ++r)
      if (!p.by_rank[r] && !joined_[r]) s.missing.push_back(r);
    out.push_back(std::move(s));
  }
  return out;
}

void Coordinator::fail_stalled(const std::string& reason) {
  stall_reason_ = reason;
  if (shutdown_rank_ < 0) shutdown_rank_ = 0;
}

bool Coordinator::agree(const Pending& p) const {
  const Request& first = p.first();
  for (const auto& q : p.by_rank) {
    if (!q) continue;
    if (q->op != first.op || q->dtype != first.dtype) return false;
    switch (first.op) {
      case OpType::Allreduce:
      case OpType::Reducescatter:
        if (q->reduce_op != first.reduce_op || q->shape != first.shape || q->prescale != first.prescale ||
            q->postscale != first.postscale)
          return false;
        break;
      case OpType::Broadcast:
        if (q->root != first.root || q->shape != first.shape) return false;
        break;
      case OpType::Allgather:
      case OpType::Alltoall:
        if (q->shape.size() != first.shape.size() ||
            !std::equal(q->shape.begin() + (q->shape.empty() ? 0 : 1), q->shape.end(),
                        first.shape.begin() + (first.shape.empty() ? 0 : 1)))
          return false;
        break;
      default:
        break;
    }
  }
  return true;
}

std::string Coordinator::validate(const std::string& name, const Pending& p) const {
  const auto& q = p.by_rank;
  const Request& first = p.first();
  if (p.count < world_size_ && first.op != OpType::Allreduce) {
    std::string ranks;
    for (int r = 0; r < world_size_; ++r)
      if (!q[r]) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    return std::string(op_type_name(first.op)) + " of tensor '" + name + "' while rank(s) " + ranks +
           " have joined: only allreduce works until every rank has joined";
  }
  if (agree(p)) return "";  // the common case: no text to build
  std::string err = compare(name, "operation", q, [](const Request& r) { return std::string(op_type_name(r.op)); });
  if (err.empty()) err = compare(name, "dtype", q, [](const Request& r) { return std::string(dtype_name(r.dtype)); });
  if (!err.empty()) return err;
  switch (first.op) {
    case OpType::Allreduce:
    case OpType::Reducescatter:
      err = compare(name, "reduce op", q, [](const Request& r) { return std::string(reduce_op_name(r.reduce_op)); });
      if (err.empty()) err = compare(name, "shape", q, [](const Request& r) { return shape_str(r.shape); });
      if (err.empty()) err = compare(name, "prescale_factor", q, [](const Request& r) { return num_str(r.prescale); });
      if (err.empty()) err = compare(name, "postscale_factor", q, [](const Request& r) { return num_str(r.postscale); });
      break;
    case OpType::Broadcast:
      err = compare(name, "root rank", q, [](const Request& r) { return std::to_string(r.root); });
      if (err.empty()) err = compare(name, "shape", q, [](const Request& r) { return shape_str(r.shape); });
      break;
    case OpType::Allgather:
    case OpType::Alltoall:
      err = compare(name, "rank (number of dimensions)", q,
                    [](const Request& r) { return std::to_string(r.shape.size()); });
      if (err.empty())
        err = compare(name, "shape after the first dimension", q,
                      [](const Request& r) { return shape_str(tail_dims(r.shape)); });
      break;
    case OpType::Barrier:
    case OpType::Join:
      break;
  }
  return err;
}

Response Coordinator::execute_response(const std::string& name, const Pending& p) const {
  Response r;
  const Request& first = p.first();
  r.kind = ResponseKind::Execute;
  r.op = first.op;
  r.names.push_back(name);
  r.dtype = first.dtype;
  r.reduce_op = first.reduce_op;
  r.prescale = first.prescale;
  r.postscale = first.postscale;
  if (r.op == OpType::Allreduce) {
    r.sizes.push_back(first.num_elements());
  } else if (r.op == OpType::Allgather) {
    for (const auto& q : p.by_rank) r.sizes.push_back(q->shape.empty() ? 1 : q->shape[0]);
  } else if (r.op == OpType::Alltoall) {
    for (const auto& q : p.by_rank) r.sizes.insert(r.sizes.end(), q->splits.begin(), q->splits.end());
  }
  return r;
}

ResponseList Coordinator::take() {
  ResponseList list;
  // Allreduces fuse when dtype, op and scale factors agree.
  using Key = std::tuple<int, int, double, double>;
  std::map<Key, std::pair<size_t, size_t>> open;  // key -> (index in responses, bytes)
  const long long ts = timeline_ ? timeline_->now() : -1;
  for (const std::string& name : ready_) {
    auto node = table_.extract(name);
    Pending& p = node.mapped();
    if (timeline_) timeline_->negotiate_end(name, &p.timeline_row, ts);
    std::string err = validate(name, p);
    if (!err.empty()) {
      Response r;
      r.kind = ResponseKind::Error;
      r.op = p.first().op;
      r.names.push_back(name);
      r.error_kind = static_cast<int32_t>(err.rfind("Mismatched", 0) == 0 ? ErrorKind::Mismatch : ErrorKind::BadArgument);
      r.error = err;
      list.responses.push_back(std::move(r));
      continue;
    }
    if (cache_->id_of(name) < 0 && !cache_->full() && p.count == world_size_) {
      uint32_t id = static_cast<uint32_t>(cache_->size());
      cache_->put(name, id);
      for (int rank = 0; rank < world_size_; ++rank) cache_->set_signature(id, rank, *p.by_rank[rank]);
      list.cache_puts.push_back({name, id});
    }
    const Request& q = p.first();
    if (q.op == OpType::Allreduce) {
      size_t bytes = static_cast<size_t>(q.num_elements()) * dtype_size(q.dtype);
      Key key{static_cast<int>(q.dtype), static_cast<int>(q.reduce_op), q.prescale, q.postscale};
      auto it = open.find(key);
      if (bytes < alone_bytes_ && it != open.end() && it->second.second + bytes <= fusion_threshold_) {
        Response& fused = list.responses[it->second.first];
        fused.names.push_back(name);
        fused.sizes.push_back(q.num_elements());
        fused.timeline_rows.push_back(p.timeline_row.id);
        if (fused.timeline_file != p.timeline_row.file) fused.timeline_file = 0;  // rows of two files
        it->second.second += bytes;
        continue;
      }
      if (bytes < alone_bytes_) open[key] = {list.responses.size(), bytes};
    }
    list.responses.push_back(execute_response(name, p));
    list.responses.back().timeline_rows.push_back(p.timeline_row.id);
    list.responses.back().timeline_file = p.timeline_row.file;
  }
  ready_.clear();
  ready_bytes_ = 0;
  ready_alone_ = false;
  arrival_.erase(std::remove_if(arrival_.begin(), arrival_.end(), [&](const std::string& n) { return !table_.count(n); }),
                 arrival_.end());
  if (join_count_ == world_size_) {
    Response r;
    r.op = OpType::Join;
    r.names.push_back(join_name_);
    r.sizes.push_back(last_joined_);
    list.responses.push_back(std::move(r));
    std::fill(joined_.begin(), joined_.end(), false);
    join_count_ = 0;
  }
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
  else list.shutdown_kind = static_cast<int32_t>(ErrorKind::Timeout);
  for (const std::string& name : arrival_) {
    const Pending& p = table_.at(name);
    std::vector<std::string> missing;
    for (int r = 0; r < world_size_; ++r)
      if (!p.by_rank[r]) missing.push_back(std::to_string(r));
    std::string ranks;
    for (size_t i = 0; i < missing.size(); ++i) ranks += (i ? ", " : "") + missing[i];
    Response r;
    r.kind = ResponseKind::Error;
    r.names.push_back(name);
    // A rank that leaves while others wait for it is a lost peer to them.
    r.error_kind = static_cast<int32_t>(stall_reason_.empty() ? ErrorKind::PeerFailure : ErrorKind::Timeout);
    r.error = stall_reason_.empty()
                  ? "lost " + rank_name(shutdown_rank_) + ": it left the job (called shutdown()) while tensor '" + name +
                        "' was never submitted by rank(s) " + ranks
                  : stall_reason_;
    list.responses.push_back(std::move(r));
  }
  table_.clear();
  arrival_.clear();
}

}  // namespace ring
