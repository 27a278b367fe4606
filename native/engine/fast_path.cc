#include "engine/fast_path.h"

#include <cstring>
#include <thread>

#include "collectives/slices.h"
#include "collectives/tree_order.h"
#include "common/error.h"
#include "common/log.h"
#include "reduce/reduce.h"

namespace ring {
namespace {

// The longest round message accepted: round_bytes of data and its items.
constexpr size_t kMaxFastMessage = 16u << 20;

size_t bytes_of(const Request& q) { return static_cast<size_t>(q.num_elements()) * dtype_size(q.dtype); }

// out = the n contributions `parts` (count elements each) reduced in the
// ring allreduce's order (collectives/reducescatter.cc), bit for bit what
// the negotiated allreduce gives: slice c of the tensor (collectives/
// slices.h) starts from rank c+1's and each next rank k = c+2, ..., c
// (mod n) combines as x_k (op) partial.
void reduce_in_ring_order(uint8_t* out, const std::vector<const uint8_t*>& parts, size_t count, DataType dtype,
                          ReduceOp op) {
  const int n = static_cast<int>(parts.size());
  const size_t esize = dtype_size(dtype);
  std::vector<uint8_t> scratch;
  for (int c = 0; c < n; ++c) {
    const size_t at = slice_offset(count, n, c) * esize, len = slice_count(count, n, c) * esize;
    if (!len) continue;
    std::memcpy(out + at, parts[(c + 1) % n] + at, len);
    for (int k = 2; k <= n; ++k)
      reduce_ordered(out + at, out + at, parts[(c + k) % n] + at, len, dtype, op, false, scratch);
  }
}

}  // namespace

FastPath::FastPath(Mesh* control, const ResponseCache* cache, HandleTable* handles, PendingMap* pending,
                   FastPathOptions opts)
    : control_(control),
      cache_(cache),
      handles_(handles),
      pending_(pending),
      opts_(opts),
      rank_(control->rank()),
      size_(control->size()),
      on_(opts.enabled && opts.ring_order && size_ >= 2 && size_ <= opts.max_ranks),
      inbox_(size_) {}

bool FastPath::eligible(const Request& q) const {
  return q.op == OpType::Allreduce && q.process_set == 0 && q.device.type == DeviceType::CPU &&
         q.reduce_op != ReduceOp::Adasum && bytes_of(q) <= opts_.tensor_bytes;
}

void FastPath::begin_batch(const std::vector<Entry>& fresh) {
  if (!on_) return;
  size_t bytes = 0;
  for (const auto& [id, h] : held_) bytes += h.bytes;
  for (const Entry& e : fresh)
    if (eligible(e.req)) bytes += bytes_of(e.req);
  // A batch too large for one message is better fused by the negotiation.
  batch_fits_ = bytes <= opts_.round_bytes;
}

bool FastPath::admit(const Request& q, Clock::time_point now) {
  if (q.op == OpType::Join) {
    dirty_ |= !joined_;
    joined_ = true;
    return false;
  }
  if (!on_) return false;
  const int64_t id = cache_->id_of(q.name);
  if (id < 0) return false;
  const auto u = static_cast<uint32_t>(id);
  const bool agreed = u < agreed_.size() && agreed_[u] && *agreed_[u] == q;
  if (!agreed || !batch_fits_ || no_fast() || peer_no_fast_ || !eligible(q)) {
    note_slow(u, q.name);
    return false;
  }
  held_[u] = Held{q.name, now, static_cast<uint32_t>(bytes_of(q))};
  slow_.erase(u);  // an earlier submission's, done by now (one name is pending once)
  dirty_ = true;
  return true;
}

void FastPath::note_slow(uint32_t id, const std::string& name) {
  slow_[id] = name;
  // A peer that held it in the last round may wait for it: tell it.
  if (id < peer_waits_.size() && peer_waits_[id]) dirty_ = true;
}

std::map<uint32_t, FastPath::Held>::iterator FastPath::give_back(std::map<uint32_t, Held>::iterator it,
                                                                 std::vector<Request>& back) {
  back.push_back(entry_of(it->second.name).req);
  note_slow(it->first, it->second.name);
  return held_.erase(it);
}

Entry& FastPath::entry_of(const std::string& name) {
  auto it = pending_->find(name);
  if (it == pending_->end())
    throw_error(ErrorKind::Internal, "fast path holds '" + name + "', which this rank has no longer pending");
  return it->second;
}

void FastPath::receive(int peer, std::vector<uint8_t> msg) {
  if (!on_)
    throw_error(ErrorKind::BadArgument, control_->peer_name(peer) +
                                            " takes the fast path and this rank does not: set RING_FAST_PATH "
                                            "alike on every rank");
  FastMessage m = FastMessage::decode(std::move(msg));
  const uint64_t expected = round_ + inbox_[peer].size();
  if (m.round != expected || inbox_[peer].size() >= 2)
    throw_error(ErrorKind::Internal, "fast path out of step: " + control_->peer_name(peer) + " sent round " +
                                         std::to_string(m.round) + ", expected " + std::to_string(expected));
  inbox_[peer].push_back(std::move(m));
}

void FastPath::poll() {
  if (!on_ || rank_ == 0) return;
  for (int p = 1; p < size_; ++p) {
    if (p == rank_) continue;
    while (control_->readable(p)) {
      std::vector<uint8_t> msg = control_->recv_msg(p, kMaxFastMessage);
      if (msg.empty()) continue;  // a heartbeat
      if (!FastMessage::is_fast(msg))
        throw_error(ErrorKind::Internal, "unexpected control message from " + control_->peer_name(p));
      receive(p, std::move(msg));
    }
  }
}

void FastPath::finish_before_end(double grace_s) {
  if (!on_) return;
  const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(grace_s));
  std::vector<bool> closed(size_, false);
  std::vector<Request> back;  // the job ends: nothing goes back
  try {
    while (Clock::now() < until) {
      if (!sent_ && !peer_spoke()) return;  // in no round
      for (int p = 0; p < size_; ++p) {
        if (p == rank_ || closed[p]) continue;
        try {
          while (control_->readable(p)) {
            std::vector<uint8_t> msg = control_->recv_msg(p, kMaxFastMessage);
            if (!msg.empty() && FastMessage::is_fast(msg)) receive(p, std::move(msg));
          }
        } catch (const RingError&) {
          closed[p] = true;  // the rank that left: its messages came before the news
        }
      }
      step(Clock::now(), back);
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  } catch (const RingError&) {
    // The round cannot finish: its operations end with the job.
  }
}

bool FastPath::readable() {
  if (!on_ || rank_ == 0) return false;
  for (int p = 1; p < size_; ++p)
    if (p != rank_ && control_->readable(p)) return true;
  return false;
}

void FastPath::send_round() {
  FastWriter w(round_, no_fast());
  size_t bytes = 0;
  auto h = held_.begin();
  auto s = slow_.begin();
  while (h != held_.end() || s != slow_.end()) {
    if (s != slow_.end() && (h == held_.end() || s->first < h->first)) {
      // Reported while it is pending in the negotiation on this rank.
      if (pending_->count(s->second)) w.slow((s++)->first);
      else s = slow_.erase(s);
      continue;
    }
    const Held& held = h->second;
    if (!no_fast() && bytes + held.bytes <= opts_.round_bytes) {
      const Entry& e = entry_of(held.name);
      uint8_t* dst = w.hit(h->first, held.bytes);
      if (held.bytes) std::memcpy(dst, e.input, held.bytes);
      if (e.req.prescale != 1.0)
        scale_buffer(dst, static_cast<size_t>(e.req.num_elements()), e.req.dtype, e.req.prescale);
      bytes += held.bytes;
    }
    ++h;
  }
  std::vector<uint8_t> msg = w.finish();
  for (int p = 0; p < size_; ++p)
    if (p != rank_) control_->send_msg(p, msg);
  own_ = FastMessage::decode(std::move(msg));
  sent_ = true;
  sent_at_ = Clock::now();
  warned_ = false;
  dirty_ = false;
}

bool FastPath::peer_spoke() const {
  for (int p = 0; p < size_; ++p)
    if (p != rank_ && !inbox_[p].empty()) return true;
  return false;
}

bool FastPath::round_complete() const {
  for (int p = 0; p < size_; ++p)
    if (p != rank_ && inbox_[p].empty()) return false;
  return true;
}

bool FastPath::step(Clock::time_point now, std::vector<Request>& back) {
  if (!on_) return false;
  bool progress = false;
  while (true) {
    if (!sent_ && (dirty_ || peer_spoke())) {
      send_round();
      progress = true;
    }
    if (!sent_) break;
    if (!round_complete()) {
      check_answered(now);
      break;
    }
    finish_round(back);
    progress = true;
  }
  if (!sent_) progress |= expire(now, back);
  return progress;
}

void FastPath::check_answered(Clock::time_point now) {
  const double waited = std::chrono::duration<double>(now - sent_at_).count();
  const bool warn = !warned_ && opts_.warn_after_s > 0 && waited >= opts_.warn_after_s;
  if (waited < opts_.answer_timeout_s && !warn) return;
  std::string who;
  for (int p = 0; p < size_; ++p)
    if (p != rank_ && inbox_[p].empty()) who += (who.empty() ? "" : ", ") + control_->peer_name(p);
  const std::string what = "fast path: round " + std::to_string(round_) + " has waited " +
                           std::to_string(static_cast<int>(waited)) + " s for " + who +
                           " (a stopped or stalled rank, or RING_FAST_PATH not set alike on every rank)";
  if (waited >= opts_.answer_timeout_s) throw_error(ErrorKind::Timeout, what);
  warned_ = true;
  log_line(LogLevel::Warning, what);
}

void FastPath::finish_round(std::vector<Request>& back) {
  std::vector<const FastMessage*> msgs(size_);
  for (int p = 0; p < size_; ++p) msgs[p] = p == rank_ ? &own_ : &inbox_[p].front();
  const FastDecision d = decide(msgs);
  peer_no_fast_ = false;
  for (int p = 0; p < size_; ++p) peer_no_fast_ |= p != rank_ && msgs[p]->no_fast;
  std::fill(peer_waits_.begin(), peer_waits_.end(), 0);
  std::vector<uint32_t> runs;
  for (const auto& [id, verdict] : d.verdicts) {
    auto it = held_.find(id);
    if (verdict == FastVerdict::Run) runs.push_back(id);
    else if (verdict == FastVerdict::Back && it != held_.end()) give_back(it, back);
    else if (verdict == FastVerdict::Wait && it == held_.end()) {
      if (peer_waits_.size() <= id) peer_waits_.resize(id + 1, 0);
      peer_waits_[id] = 1;
    }
  }
  run(runs, msgs);
  if (d.no_fast)
    for (auto it = held_.begin(); it != held_.end();) it = give_back(it, back);
  for (int p = 0; p < size_; ++p)
    if (p != rank_) inbox_[p].pop_front();
  ++round_;
  sent_ = false;
}

void FastPath::run(const std::vector<uint32_t>& ids, const std::vector<const FastMessage*>& msgs) {
  if (ids.empty()) return;
  std::vector<size_t> at(size_, 0);  // each message's next item (ids ascend)
  std::vector<int64_t> handles;
  std::vector<OpResult> results;
  for (uint32_t id : ids) {
    auto h = held_.find(id);
    if (h == held_.end()) throw_error(ErrorKind::Internal, "fast path runs a tensor this rank does not hold");
    auto node = pending_->extract(h->second.name);
    const Entry& e = node.mapped();
    const Request& q = e.req;
    const size_t count = static_cast<size_t>(q.num_elements()), bytes = h->second.bytes;
    std::vector<const uint8_t*> parts(size_);
    for (int r = 0; r < size_; ++r) {
      const auto& items = msgs[r]->items;
      while (at[r] < items.size() && items[at[r]].id < id) ++at[r];
      if (at[r] == items.size() || !items[at[r]].hit || items[at[r]].bytes != bytes)
        throw_error(ErrorKind::Internal, "fast path: " + control_->peer_name(r) + " sent '" + q.name +
                                             "' in another size than this rank");
      parts[r] = items[at[r]].data;
    }
    OpResult res;
    uint8_t* out = static_cast<uint8_t*>(e.output);
    if (!out) {
      res.data = std::make_shared<std::vector<uint8_t>>(bytes);
      out = res.data->data();
    }
    reduce_in_ring_order(out, parts, count, q.dtype, q.reduce_op);
    const double post = q.post_factor(size_);
    if (post != 1.0) scale_buffer(out, count, q.dtype, post);
    res.shape = q.shape;
    handles.push_back(e.handle);
    results.push_back(std::move(res));
    held_.erase(h);
  }
  handles_->complete_all(handles, results);
}

bool FastPath::expire(Clock::time_point now, std::vector<Request>& back) {
  const auto patience = std::chrono::duration<double>(opts_.patience_s);
  bool any = false;
  for (auto it = held_.begin(); it != held_.end();) {
    if (now - it->second.since < patience) {
      ++it;
      continue;
    }
    it = give_back(it, back);
    any = true;
  }
  return any;
}

void FastPath::note_response(const Response& r) {
  if (r.kind != ResponseKind::Execute) return;
  if (r.op == OpType::Join) {
    // Allreduces during the join left the joined rank out: agree anew.
    agreed_.clear();
    dirty_ |= joined_;
    joined_ = false;
    return;
  }
  if (!on_ || r.op != OpType::Allreduce || r.process_set != 0) return;
  for (const std::string& name : r.names) {
    const int64_t id = cache_->id_of(name);
    if (id < 0) continue;
    auto it = pending_->find(name);
    if (it == pending_->end() || !eligible(it->second.req)) continue;
    const auto u = static_cast<uint32_t>(id);
    if (agreed_.size() <= u) agreed_.resize(u + 1);
    if (!agreed_[u] || *agreed_[u] != it->second.req) agreed_[u] = std::make_unique<Request>(it->second.req);
  }
}

void FastPath::set_recording(bool recording) {
  dirty_ |= recording != recording_;
  recording_ = recording;
}

}  // namespace ring
