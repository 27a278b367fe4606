#include "transport/handshake.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "common/error.h"
#include "transport/sha256.h"

namespace ring {
namespace {

constexpr char kMagic[5] = {'R', 'I', 'N', 'G', '1'};
constexpr uint8_t kVersion = 1;
constexpr uint8_t kAck = 'K';

void put_u32(std::vector<uint8_t>& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

uint32_t get_u32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

bool read_urandom(void* buf, size_t len) {
  int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  uint8_t* p = static_cast<uint8_t*>(buf);
  while (len > 0) {
    ssize_t n = ::read(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    p += n;
    len -= static_cast<size_t>(n);
  }
  ::close(fd);
  return len == 0;
}

}  // namespace

void random_bytes(void* buf, size_t len) {
  uint8_t* p = static_cast<uint8_t*>(buf);
  size_t done = 0;
  while (done < len) {
    ssize_t n = ::getrandom(p + done, len - done, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // ENOSYS on old kernels: fall back below
    done += static_cast<size_t>(n);
  }
  if (done < len && !read_urandom(p + done, len - done))
    throw_error(ErrorKind::Internal, "no source of random bytes (getrandom and /dev/urandom failed)");
}

Handshake Handshake::connector(const std::string& secret, int my_rank, int peer_rank) {
  Handshake hs;
  hs.is_connector_ = true;
  hs.secret_ = secret;
  hs.my_rank_ = my_rank;
  hs.peer_rank_ = peer_rank;
  random_bytes(hs.nonce_c_, sizeof(hs.nonce_c_));
  hs.out_.assign(kMagic, kMagic + sizeof(kMagic));
  hs.out_.push_back(kVersion);
  hs.out_.push_back(0);
  hs.out_.push_back(0);
  put_u32(hs.out_, static_cast<uint32_t>(my_rank));
  put_u32(hs.out_, static_cast<uint32_t>(peer_rank));
  hs.out_.insert(hs.out_.end(), hs.nonce_c_, hs.nonce_c_ + sizeof(hs.nonce_c_));
  hs.awaiting_ = Frame::Reply;
  hs.expected_ = kReplyBytes;
  return hs;
}

Handshake Handshake::acceptor(const std::string& secret, int my_rank, int size) {
  Handshake hs;
  hs.secret_ = secret;
  hs.my_rank_ = my_rank;
  hs.size_ = size;
  hs.awaiting_ = Frame::Hello;
  hs.expected_ = kHelloBytes;
  return hs;
}

std::vector<uint8_t> Handshake::transcript() const {
  int connector = is_connector_ ? my_rank_ : peer_rank_;
  int acceptor = is_connector_ ? peer_rank_ : my_rank_;
  std::vector<uint8_t> t(kMagic, kMagic + sizeof(kMagic));
  t.push_back(kVersion);
  put_u32(t, static_cast<uint32_t>(connector));
  put_u32(t, static_cast<uint32_t>(acceptor));
  t.insert(t.end(), nonce_c_, nonce_c_ + sizeof(nonce_c_));
  t.insert(t.end(), nonce_a_, nonce_a_ + sizeof(nonce_a_));
  return t;
}

std::vector<uint8_t> Handshake::mac(const char* label) const {
  std::vector<uint8_t> msg(label, label + std::strlen(label));
  std::vector<uint8_t> t = transcript();
  msg.insert(msg.end(), t.begin(), t.end());
  Digest d = hmac_sha256(secret_.data(), secret_.size(), msg.data(), msg.size());
  return std::vector<uint8_t>(d.begin(), d.end());
}

Handshake::SessionKeys Handshake::session_keys() const {
  std::vector<uint8_t> to_acceptor = mac("key connector->acceptor");
  std::vector<uint8_t> to_connector = mac("key acceptor->connector");
  if (is_connector_) return SessionKeys{to_acceptor, to_connector};
  return SessionKeys{to_connector, to_acceptor};
}

std::vector<uint8_t> Handshake::take_output() {
  std::vector<uint8_t> pending(out_.begin() + static_cast<long>(out_sent_), out_.end());
  out_.clear();
  out_sent_ = 0;
  return pending;
}

void Handshake::on_input(const uint8_t* frame) {
  switch (awaiting_) {
    case Frame::Hello: on_hello(frame); break;
    case Frame::Reply: on_reply(frame); break;
    case Frame::Proof: on_proof(frame); break;
    case Frame::Ack:
      if (frame[0] != kAck) throw HandshakeError("acceptor sent a malformed acknowledgement");
      awaiting_ = Frame::None;
      expected_ = 0;
      break;
    case Frame::None: throw HandshakeError("unexpected input after the handshake finished");
  }
}

void Handshake::on_hello(const uint8_t* f) {
  if (std::memcmp(f, kMagic, sizeof(kMagic)) != 0) throw HandshakeError("not a ring connection (bad magic)");
  if (f[5] != kVersion)
    throw HandshakeError("protocol version " + std::to_string(f[5]) + ", expected " + std::to_string(kVersion));
  uint32_t from = get_u32(f + 8), to = get_u32(f + 12);
  if (to != static_cast<uint32_t>(my_rank_))
    throw HandshakeError("connection meant for rank " + std::to_string(to));
  // Only higher ranks dial lower ones; anything else is not a peer of ours.
  if (from <= static_cast<uint32_t>(my_rank_) || from >= static_cast<uint32_t>(size_))
    throw HandshakeError("connection claims to come from rank " + std::to_string(from));
  peer_rank_ = static_cast<int>(from);
  std::memcpy(nonce_c_, f + 16, sizeof(nonce_c_));
  random_bytes(nonce_a_, sizeof(nonce_a_));
  out_.insert(out_.end(), nonce_a_, nonce_a_ + sizeof(nonce_a_));
  std::vector<uint8_t> m = mac("acceptor");
  out_.insert(out_.end(), m.begin(), m.end());
  awaiting_ = Frame::Proof;
  expected_ = kProofBytes;
}

void Handshake::on_reply(const uint8_t* f) {
  std::memcpy(nonce_a_, f, sizeof(nonce_a_));
  std::vector<uint8_t> expected = mac("acceptor");
  if (!constant_time_equal(expected.data(), f + 32, 32))
    throw HandshakeError("rank " + std::to_string(peer_rank_) +
                         " failed authentication (wrong job secret, or not the peer the endpoint named)");
  std::vector<uint8_t> m = mac("connector");
  out_.insert(out_.end(), m.begin(), m.end());
  awaiting_ = Frame::Ack;
  expected_ = kAckBytes;
}

void Handshake::on_proof(const uint8_t* f) {
  std::vector<uint8_t> expected = mac("connector");
  if (!constant_time_equal(expected.data(), f, 32))
    throw HandshakeError("connection claiming to be rank " + std::to_string(peer_rank_) +
                         " failed authentication (wrong job secret or replayed handshake)");
  out_.push_back(kAck);
  awaiting_ = Frame::None;
  expected_ = 0;
}

bool Handshake::advance(int fd) {
  for (;;) {
    if (out_sent_ < out_.size()) {
      ssize_t n = ::send(fd, out_.data() + out_sent_, out_.size() - out_sent_, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return false;
        throw HandshakeError(std::string("send failed during the handshake: ") + std::strerror(errno));
      }
      out_sent_ += static_cast<size_t>(n);
      continue;
    }
    if (expected_ == 0) return true;
    // Read exactly the rest of this frame: bytes after the handshake belong
    // to the channel.
    size_t have = in_.size();
    in_.resize(expected_);
    ssize_t n = ::recv(fd, in_.data() + have, expected_ - have, MSG_DONTWAIT);
    if (n <= 0) {
      int err = errno;
      in_.resize(have);
      if (n == 0) throw HandshakeError("connection closed during the handshake");
      if (err == EINTR) continue;
      if (err == EAGAIN || err == EWOULDBLOCK) return false;
      throw HandshakeError(std::string("recv failed during the handshake: ") + std::strerror(err));
    }
    in_.resize(have + static_cast<size_t>(n));
    if (in_.size() == expected_) {
      std::vector<uint8_t> frame;
      frame.swap(in_);
      on_input(frame.data());
    }
  }
}

short Handshake::poll_events() const { return out_sent_ < out_.size() ? POLLOUT : POLLIN; }

void run_handshake(Handshake& hs, int fd, double timeout_s) {
  using Clock = std::chrono::steady_clock;
  auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  while (!hs.advance(fd)) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) throw HandshakeError("handshake timed out");
    pollfd p{fd, hs.poll_events(), 0};
    ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 100)));
  }
}

}  // namespace ring
