// The Mesh progress loop. One loop drives a send to one peer and a receive
// from another at the same time, so a ring step (send right, receive left)
// never deadlocks on full buffers whatever the message size.
#include "transport/mesh.h"

#include <poll.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <sstream>

#include "common/error.h"
#include "transport/doorbell.h"
#include "transport/waiter.h"

namespace ring {
namespace {

constexpr double kLivenessCheckSeconds = 0.05;

void little_endian_u64(uint64_t v, uint8_t out[8]) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(v >> (8 * i));
}

uint64_t read_u64(const uint8_t in[8]) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(in[i]) << (8 * i);
  return v;
}

// The one doorbell every channel of `channels` rings (null entries are not
// involved), or null when one has none (a socket) or they differ.
template <class Channels>
Doorbell* common_doorbell(const Channels& channels) {
  Doorbell* bell = nullptr;
  for (const auto& c : channels) {
    if (!c) continue;
    Doorbell* b = c->doorbell();
    if (!b || (bell && b != bell)) return nullptr;
    bell = b;
  }
  return bell;
}

}  // namespace

Mesh::Mesh(int rank, int size, std::vector<std::unique_ptr<Channel>> channels,
           std::vector<std::string> peer_names)
    : rank_(rank), size_(size), peer_names_(std::move(peer_names)) {
  for (auto& c : channels) channels_.push_back(std::move(c));
  if (static_cast<int>(channels_.size()) != size_ || static_cast<int>(peer_names_.size()) != size_)
    throw_error(ErrorKind::Internal, "Mesh: channels and peer_names must have one entry per rank");
  doorbell_ = common_doorbell(channels_);
}

Mesh::Mesh(int rank, int size, std::vector<std::shared_ptr<Channel>> channels, std::vector<std::string> peer_names,
           Mesh* parent)
    : rank_(rank), size_(size), channels_(std::move(channels)), parent_(parent), peer_names_(std::move(peer_names)) {
  doorbell_ = common_doorbell(channels_);
}

Mesh::~Mesh() { close(); }

std::unique_ptr<Mesh> Mesh::subgroup(const std::vector<int>& members) {
  std::vector<std::shared_ptr<Channel>> channels;
  std::vector<std::string> names;
  int me = -1;
  for (size_t i = 0; i < members.size(); ++i) {
    int r = members[i];
    if (r < 0 || r >= size_) throw_error(ErrorKind::Internal, "Mesh::subgroup: no rank " + std::to_string(r));
    if (r == rank_) me = static_cast<int>(i);
    channels.push_back(r == rank_ ? nullptr : channels_[r]);
    names.push_back(peer_names_[r]);
  }
  if (me < 0) throw_error(ErrorKind::Internal, "Mesh::subgroup: this rank is not a member");
  return std::unique_ptr<Mesh>(new Mesh(me, static_cast<int>(members.size()), std::move(channels), std::move(names),
                                        this));
}

std::string Mesh::abort_reason() const {
  if (parent_ && parent_->aborted()) return parent_->abort_reason();
  std::lock_guard<std::mutex> lock(abort_mu_);
  return abort_reason_;
}

void Mesh::abort(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(abort_mu_);
    if (aborted_.load()) return;
    abort_reason_ = reason;
  }
  aborted_.store(true, std::memory_order_release);
}

void Mesh::close() {
  if (parent_) return;
  for (auto& c : channels_)
    if (c) c->close();
}

void Mesh::sendrecv(int to, const void* sbuf, size_t slen, int from, void* rbuf, size_t rlen) {
  uint8_t* out = static_cast<uint8_t*>(rbuf);
  sendrecv_sink(to, sbuf, slen, from, rlen, 1,
                [out](const uint8_t* data, size_t offset, size_t len) { std::memcpy(out + offset, data, len); });
}

// One sendrecv_sink call in progress: a send of `slen` bytes to one channel
// and a receive of `rlen` bytes from another, each preceded by its
// alignment padding. pump_send / pump_recv move what the channels take or
// hold right now and never block; `peer` names the peer being served when a
// channel throws.
class Mesh::Transfer {
 public:
  // Sends `pieces` back to back (none empty) as one message.
  Transfer(Channel* out, std::vector<Piece> pieces, Channel* in, size_t rlen, size_t granule, const Sink& sink)
      : out_(out), left_(std::move(pieces)), in_(in), rlen_(rlen), granule_(granule), sink_(sink) {
    for (const Piece& p : left_) slen_ += p.len;
    spad_ = slen_ ? pad_for(out->stream_out, slen_) : 0;
    rpad_ = rlen ? pad_for(in->stream_in, rlen) : 0;
  }

  // Bytes (padding included) left to move in each direction.
  bool sending() const { return sent_ < slen_ || spad_done_ < spad_; }
  bool receiving() const { return received_ < rlen_ || rpad_done_ < rpad_; }
  // The message itself, for liveness checks and errors.
  bool sending_data() const { return sent_ < slen_; }
  bool receiving_data() const { return received_ < rlen_; }
  std::string progress_text(const std::string& to, const std::string& from) const {
    std::ostringstream os;
    if (sending_data()) os << "; sending " << sent_ << "/" << slen_ << " bytes to " << to;
    if (receiving_data()) os << "; receiving " << received_ << "/" << rlen_ << " bytes from " << from;
    return os.str();
  }

  // True when bytes moved.
  bool pump_send() {
    if (!sending()) return false;
    if (spad_done_ < spad_) {
      const size_t n = out_->try_write(kZeros, spad_ - spad_done_);
      spad_done_ += n;
      out_->stream_out += n;
      return n > 0;
    }
    const size_t n = out_->try_write_pieces(left_.data() + next_, left_.size() - next_);
    sent_ += n;
    out_->stream_out += n;
    for (size_t k = n; k > 0;) {  // drops what went out from the front of the list
      Piece& p = left_[next_];
      const size_t take = std::min(k, p.len);
      p.data += take;
      p.len -= take;
      k -= take;
      if (p.len == 0) ++next_;
    }
    return n > 0;
  }

  // True when bytes moved. Hands whole granules to the sink straight from
  // the channel's memory; an element split across two spans is carried.
  bool pump_recv() {
    if (rpad_done_ < rpad_) return skip_padding();
    if (received_ >= rlen_) return false;
    auto span = in_->peek(rlen_ - received_ - carry_len_);
    if (span.second == 0) return false;
    const uint8_t* p = span.first;
    size_t avail = span.second;
    if (carry_len_ > 0) finish_carry(p, avail);
    size_t whole = (received_ + avail == rlen_) ? avail : avail - avail % granule_;
    if (whole > 0 && carry_len_ == 0) {
      sink_(p, received_, whole);
      received_ += whole;
      p += whole;
      avail -= whole;
    }
    if (avail > 0) {
      std::memcpy(carry_ + carry_len_, p, avail);
      carry_len_ += avail;
    }
    in_->consume(span.second);
    in_->stream_in += span.second;
    return true;
  }

 private:
  static constexpr uint8_t kZeros[kAlignBytes] = {};

  // Alignment padding, counted as part of the message on both sides.
  static size_t pad_for(uint64_t position, size_t len) {
    return len >= kAlignFrom ? static_cast<size_t>((kAlignBytes - position % kAlignBytes) % kAlignBytes) : 0;
  }

  bool skip_padding() {
    auto span = in_->peek(rpad_ - rpad_done_);
    if (span.second == 0) return false;
    in_->consume(span.second);
    in_->stream_in += span.second;
    rpad_done_ += span.second;
    return true;
  }

  // Completes the carried element from the front of the span [p, p + avail).
  void finish_carry(const uint8_t*& p, size_t& avail) {
    size_t k = std::min(granule_ - carry_len_, avail);
    std::memcpy(carry_ + carry_len_, p, k);
    carry_len_ += k;
    p += k;
    avail -= k;
    if (carry_len_ == granule_ || received_ + carry_len_ == rlen_) {
      sink_(carry_, received_, carry_len_);
      received_ += carry_len_;
      carry_len_ = 0;
    }
  }

  Channel* out_;
  std::vector<Piece> left_;  // what is still to send: left_[next_..]
  size_t next_ = 0;
  size_t slen_ = 0, spad_ = 0, sent_ = 0, spad_done_ = 0;
  Channel* in_;
  size_t rlen_, rpad_ = 0, received_ = 0, rpad_done_ = 0;
  size_t granule_;
  const Sink& sink_;
  uint8_t carry_[16];
  size_t carry_len_ = 0;
};

void Mesh::rethrow_naming(int peer, const RingError& e) const {
  if (e.kind() == ErrorKind::PeerFailure) throw RingError(e.kind(), "lost " + peer_names_[peer] + ": " + e.what());
  throw e;
}

void Mesh::check_pair(int to, size_t slen, int from, size_t rlen, size_t granule) const {
  for (int peer : {slen ? to : -1, rlen ? from : -1}) {
    if (peer == -1) continue;
    if (!has_channel(peer))
      throw_error(ErrorKind::Internal, "Mesh: no channel from rank " + std::to_string(rank_) + " to rank " +
                                           std::to_string(peer));
  }
  if (granule == 0 || granule > 16) throw_error(ErrorKind::Internal, "Mesh: granule must be 1..16");
}

void Mesh::sendrecv_sink(int to, const void* sbuf, size_t slen, int from, size_t rlen, size_t granule,
                         const Sink& sink) {
  std::vector<Piece> pieces;
  if (to != -1 && slen) pieces.push_back({static_cast<const uint8_t*>(sbuf), slen});
  sendrecv_sink(to, std::move(pieces), from, rlen, granule, sink);
}

void Mesh::sendrecv_sink(int to, std::vector<Piece> pieces, int from, size_t rlen, size_t granule,
                         const Sink& sink) {
  if (to == -1) pieces.clear();
  pieces.erase(std::remove_if(pieces.begin(), pieces.end(), [](const Piece& p) { return p.len == 0; }),
               pieces.end());
  if (from == -1) rlen = 0;
  if (pieces.empty() && rlen == 0) return;
  check_pair(to, pieces.empty() ? 0 : 1, from, rlen, granule);
  Channel* out = pieces.empty() ? nullptr : channels_[to].get();
  Channel* in = rlen ? channels_[from].get() : nullptr;
  Transfer t(out, std::move(pieces), in, rlen, granule, sink);
  Backoff backoff;
  double last_liveness = 0.0;
  int peer = -1;  // the peer being served, for naming it in errors raised by a channel
  unsigned rounds = 0;
  try {
    while (t.sending() || t.receiving()) {
      if (aborted()) throw_error(ErrorKind::PeerFailure, abort_reason());
      peer = to;
      bool progress = t.pump_send();
      peer = from;
      progress |= t.pump_recv();
      peer = -1;
      if ((++rounds & 63) == 0 || !progress) maybe_tick();  // the root mesh's tick, when due
      if (progress) {
        backoff.reset();
        last_liveness = 0.0;
        continue;
      }
      wait_for_progress(t, to, from, backoff, last_liveness, peer);
    }
  } catch (const RingError& e) {
    if (peer >= 0) rethrow_naming(peer, e);
    throw;
  }
}

void Mesh::set_tick(std::function<void()> tick, double every_s) {
  tick_ = std::move(tick);
  tick_every_s_ = every_s;
}

void Mesh::maybe_tick() {
  Mesh* root = this;
  while (root->parent_) root = root->parent_;
  if (!root->tick_) return;
  double now = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  if (now < root->next_tick_s_) return;
  root->next_tick_s_ = now + root->tick_every_s_;
  root->tick_();
}

void Mesh::wait_for_progress(const Transfer& t, int to, int from, Backoff& backoff, double& last_liveness,
                             int& peer) {
  const double idle = backoff.idle_seconds();
  if (idle - last_liveness >= kLivenessCheckSeconds) {
    last_liveness = idle;
    if (t.sending_data()) channels_[peer = to]->check_alive();
    if (t.receiving_data()) channels_[peer = from]->check_alive();
    peer = -1;
    if (idle > timeout()) {
      std::ostringstream os;
      os << "no progress for " << timeout() << " s (RING_TIMEOUT_SECONDS)";
      os << t.progress_text(to >= 0 ? peer_names_[to] : "", from >= 0 ? peer_names_[from] : "");
      throw_error(ErrorKind::Timeout, os.str());
    }
  }
  Channel* out = t.sending() ? channels_[to].get() : nullptr;
  Channel* in = t.receiving() ? channels_[from].get() : nullptr;
  Doorbell* bell = common_doorbell(std::array<Channel*, 2>{out, in});
  if (bell && backoff.blocking_due()) {
    // Only shared memory involved: sleep until a peer rings (the timeout
    // keeps abort() and the liveness checks above within a few ms).
    constexpr double kDoorbellSleepSeconds = 0.005;
    sleep_on_doorbell(bell, kDoorbellSleepSeconds,
                      [&] { return (out && out->writable()) || (in && in->peek(1).second > 0); });
    return;
  }
  const int fd_out = out ? out->fd() : -2;
  const int fd_in = in ? in->fd() : -2;
  if (fd_out != -1 && fd_in != -1 && backoff.idle_seconds() > 20e-6) {
    // Only sockets involved and the short spin is over: let the kernel wake us.
    pollfd fds[2];
    int nfds = 0;
    if (fd_out >= 0) fds[nfds++] = {fd_out, POLLOUT, 0};
    if (fd_in >= 0) fds[nfds++] = {fd_in, POLLIN, 0};
    ::poll(fds, nfds, 10);
  } else {
    backoff.wait();
  }
}

bool Mesh::readable(int from) {
  try {
    return channels_[from]->peek(1).second > 0;
  } catch (const RingError& e) {
    throw RingError(e.kind(), "lost " + peer_names_[from] + ": " + e.what());
  }
}

void Mesh::check_alive(int peer) {
  try {
    channels_[peer]->check_alive();
  } catch (const RingError& e) {
    throw RingError(e.kind(), "lost " + peer_names_[peer] + ": " + e.what());
  }
}

void Mesh::send_msg(int to, const std::vector<uint8_t>& msg) {
  uint8_t header[8];
  little_endian_u64(msg.size(), header);
  size_t taken = 0;  // bytes of header + msg the channel took at once
  if (msg.size() < kAlignFrom && has_channel(to) && !aborted()) {
    // The usual control message: header and body in one write, no transfer
    // loop (neither is long enough to be padded, on either side).
    const Piece pieces[2] = {{header, 8}, {msg.data(), msg.size()}};
    try {
      taken = channels_[to]->try_write_pieces(pieces, msg.empty() ? 1 : 2);
    } catch (const RingError& e) {
      rethrow_naming(to, e);
    }
    channels_[to]->stream_out += taken;
  }
  if (taken < 8) send(to, header + taken, 8 - taken);
  const size_t body_sent = taken > 8 ? taken - 8 : 0;
  if (body_sent < msg.size()) send(to, msg.data() + body_sent, msg.size() - body_sent);
}

bool Mesh::post_msg(int to, const std::vector<uint8_t>& msg, double patience_s) {
  if (to < 0 || to >= size_ || !channels_[to]) return false;
  std::vector<uint8_t> frame(8 + msg.size());
  little_endian_u64(msg.size(), frame.data());
  std::copy(msg.begin(), msg.end(), frame.begin() + 8);
  Backoff backoff;
  size_t sent = 0;
  try {
    while (sent < frame.size() && backoff.idle_seconds() < patience_s) {
      size_t n = channels_[to]->try_write(frame.data() + sent, frame.size() - sent);
      sent += n;
      channels_[to]->stream_out += n;
      if (n) backoff.reset();
      else backoff.wait();
    }
  } catch (const std::exception&) {
    return false;
  }
  return sent == frame.size();
}

std::vector<uint8_t> Mesh::recv_msg(int from, size_t max_len) {
  if (has_channel(from) && !aborted()) {
    // The usual control message, already whole in the channel: read it in
    // place, no transfer loop (too short to be padded).
    Channel& c = *channels_[from];
    std::pair<const uint8_t*, size_t> span;
    try {
      span = c.peek(8 + kAlignFrom);
    } catch (const RingError& e) {
      rethrow_naming(from, e);
    }
    const uint64_t len = span.second >= 8 ? read_u64(span.first) : kAlignFrom;
    if (len < kAlignFrom && len <= max_len && span.second >= 8 + len) {
      std::vector<uint8_t> msg(span.first + 8, span.first + 8 + len);
      c.consume(8 + len);
      c.stream_in += 8 + len;
      return msg;
    }
  }
  uint8_t header[8];
  recv(from, header, 8);
  uint64_t len = read_u64(header);
  if (len > max_len)
    throw_error(ErrorKind::Internal, "message of " + std::to_string(len) + " bytes from " + peer_names_[from] +
                                         " exceeds the limit of " + std::to_string(max_len));
  std::vector<uint8_t> msg(len);
  if (len) recv(from, msg.data(), len);
  return msg;
}

}  // namespace ring
