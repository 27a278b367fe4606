// The Mesh progress loop. One loop drives a send to one peer and a receive
// from another at the same time, so a ring step (send right, receive left)
// never deadlocks on full buffers whatever the message size.
#include "transport/mesh.h"

#include <poll.h>

#include <algorithm>
#include <cstring>
#include <sstream>

#include "common/error.h"
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

}  // namespace

Mesh::Mesh(int rank, int size, std::vector<std::unique_ptr<Channel>> channels,
           std::vector<std::string> peer_names)
    : rank_(rank), size_(size), peer_names_(std::move(peer_names)) {
  for (auto& c : channels) channels_.push_back(std::move(c));
  if (static_cast<int>(channels_.size()) != size_ || static_cast<int>(peer_names_.size()) != size_)
    throw_error(ErrorKind::Internal, "Mesh: channels and peer_names must have one entry per rank");
}

Mesh::Mesh(int rank, int size, std::vector<std::shared_ptr<Channel>> channels, std::vector<std::string> peer_names,
           Mesh* parent)
    : rank_(rank), size_(size), channels_(std::move(channels)), parent_(parent), peer_names_(std::move(peer_names)) {}

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

void Mesh::sendrecv_sink(int to, const void* sbuf, size_t slen, int from, size_t rlen, size_t granule,
                         const Sink& sink) {
  if (to == -1) slen = 0;
  if (from == -1) rlen = 0;
  if (slen == 0 && rlen == 0) return;
  for (int peer : {slen ? to : -1, rlen ? from : -1}) {
    if (peer == -1) continue;
    if (peer < 0 || peer >= size_ || peer == rank_ || !channels_[peer])
      throw_error(ErrorKind::Internal, "Mesh: no channel from rank " + std::to_string(rank_) + " to rank " +
                                           std::to_string(peer));
  }
  if (granule == 0 || granule > 16) throw_error(ErrorKind::Internal, "Mesh: granule must be 1..16");

  // Alignment padding, counted as part of the message on both sides.
  auto pad_for = [](uint64_t position, size_t len) -> size_t {
    return len >= kAlignFrom ? static_cast<size_t>((kAlignBytes - position % kAlignBytes) % kAlignBytes) : 0;
  };
  static const uint8_t kZeros[kAlignBytes] = {};
  const size_t spad = slen ? pad_for(channels_[to]->stream_out, slen) : 0;
  const size_t rpad = rlen ? pad_for(channels_[from]->stream_in, rlen) : 0;
  size_t spad_done = 0, rpad_done = 0;
  const uint8_t* sp = static_cast<const uint8_t*>(sbuf);
  size_t sent = 0, received = 0;
  uint8_t carry[16];
  size_t carry_len = 0;
  Backoff backoff;
  double last_liveness = 0.0;
  int current_peer = -1;  // for naming a peer in errors raised by a channel
  try {
    while (sent < slen || received < rlen || spad_done < spad || rpad_done < rpad) {
      if (aborted()) throw_error(ErrorKind::PeerFailure, abort_reason());
      bool progress = false;
      if (spad_done < spad) {
        current_peer = to;
        size_t n = channels_[to]->try_write(kZeros, spad - spad_done);
        spad_done += n;
        channels_[to]->stream_out += n;
        progress = n > 0;
      } else if (sent < slen) {
        current_peer = to;
        size_t n = channels_[to]->try_write(sp + sent, slen - sent);
        sent += n;
        channels_[to]->stream_out += n;
        progress = n > 0;
      }
      if (rpad_done < rpad) {
        current_peer = from;
        auto span = channels_[from]->peek(rpad - rpad_done);
        if (span.second > 0) {
          channels_[from]->consume(span.second);
          channels_[from]->stream_in += span.second;
          rpad_done += span.second;
          progress = true;
        }
      } else if (received < rlen) {
        current_peer = from;
        Channel& ch = *channels_[from];
        auto span = ch.peek(rlen - received - carry_len);
        if (span.second > 0) {
          progress = true;
          const uint8_t* p = span.first;
          size_t avail = span.second;
          if (carry_len > 0) {  // finish an element split across two spans
            size_t k = std::min(granule - carry_len, avail);
            std::memcpy(carry + carry_len, p, k);
            carry_len += k;
            p += k;
            avail -= k;
            if (carry_len == granule || received + carry_len == rlen) {
              sink(carry, received, carry_len);
              received += carry_len;
              carry_len = 0;
            }
          }
          size_t whole = (received + avail == rlen) ? avail : avail - avail % granule;
          if (whole > 0 && carry_len == 0) {
            sink(p, received, whole);
            received += whole;
            p += whole;
            avail -= whole;
          }
          if (avail > 0) {
            std::memcpy(carry + carry_len, p, avail);
            carry_len += avail;
          }
          ch.consume(span.second);
          ch.stream_in += span.second;
        }
      }
      current_peer = -1;
      if (progress) {
        backoff.reset();
        last_liveness = 0.0;
        continue;
      }
      double idle = backoff.idle_seconds();
      if (idle - last_liveness >= kLivenessCheckSeconds) {
        last_liveness = idle;
        if (sent < slen) { current_peer = to; channels_[to]->check_alive(); }
        if (received < rlen) { current_peer = from; channels_[from]->check_alive(); }
        current_peer = -1;
        if (idle > timeout()) {
          std::ostringstream os;
          os << "no progress for " << timeout() << " s (RING_TIMEOUT_SECONDS)";
          if (sent < slen) os << "; sending " << sent << "/" << slen << " bytes to " << peer_names_[to];
          if (received < rlen) os << "; receiving " << received << "/" << rlen << " bytes from " << peer_names_[from];
          throw_error(ErrorKind::Timeout, os.str());
        }
      }
      int fd_out = sent < slen || spad_done < spad ? channels_[to]->fd() : -2;
      int fd_in = received < rlen || rpad_done < rpad ? channels_[from]->fd() : -2;
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
  } catch (const RingError& e) {
    if (current_peer >= 0 && e.kind() == ErrorKind::PeerFailure)
      throw RingError(e.kind(), "lost " + peer_names_[current_peer] + ": " + e.what());
    throw;
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
  send(to, header, 8);
  if (!msg.empty()) send(to, msg.data(), msg.size());
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
