// Encrypted links (transport/aead_channel.h): the handshake's session keys,
// a byte stream through two AeadChannels, and frames that are altered,
// replayed or reordered on the wire failing authentication instead of
// delivering bytes.
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "common/error.h"
#include "tests/harness.h"
#include "transport/aead_channel.h"
#include "transport/handshake.h"
#include "transport/tcp_channel.h"

using namespace ring;

namespace {

std::vector<uint8_t> key(uint8_t fill) { return std::vector<uint8_t>(AesGcm::kKeyBytes, fill); }

// A connected pair of stream sockets (fds[0] <-> fds[1]).
std::pair<int, int> socket_pair() {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) throw_error(ErrorKind::Internal, "socketpair");
  return {fds[0], fds[1]};
}

// Writes `data` into `from` while reading `to`, until every byte arrived.
std::vector<uint8_t> stream(Channel& from, Channel& to, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> got;
  size_t sent = 0;
  while (got.size() < data.size()) {
    if (sent < data.size()) sent += from.try_write(data.data() + sent, data.size() - sent);
    auto [p, n] = to.peek(1 << 20);
    got.insert(got.end(), p, p + n);
    to.consume(n);
  }
  return got;
}

// The frames an AeadChannel puts on the wire for `messages` (one frame
// each, read from the other end of its socket), so a test can alter them.
std::vector<std::vector<uint8_t>> frames_of(const std::vector<std::vector<uint8_t>>& messages) {
  auto [a, b] = socket_pair();
  AeadChannel ch(std::make_unique<TcpChannel>(a), key(1), key(2));
  std::vector<std::vector<uint8_t>> frames;
  for (const auto& m : messages) {
    size_t sent = 0;
    while (sent < m.size()) sent += ch.try_write(m.data() + sent, m.size() - sent);
    std::vector<uint8_t> frame(4 + m.size() + AesGcm::kTagBytes);
    size_t got = 0;
    while (got < frame.size()) {
      ssize_t n = ::read(b, frame.data() + got, frame.size() - got);
      if (n <= 0) throw_error(ErrorKind::Internal, "read");
      got += static_cast<size_t>(n);
    }
    frames.push_back(frame);
  }
  ::close(b);
  return frames;
}

std::vector<uint8_t> joined(const std::vector<std::vector<uint8_t>>& frames) {
  std::vector<uint8_t> wire;
  for (const auto& f : frames) wire.insert(wire.end(), f.begin(), f.end());
  return wire;
}

// Reads `wire` through an AeadChannel with the matching key; the bytes it delivers.
std::vector<uint8_t> receive(const std::vector<uint8_t>& wire) {
  auto [a, b] = socket_pair();
  AeadChannel ch(std::make_unique<TcpChannel>(b), key(2), key(1));
  if (::write(a, wire.data(), wire.size()) != static_cast<ssize_t>(wire.size())) throw_error(ErrorKind::Internal, "write");
  std::vector<uint8_t> got;
  for (int spins = 0; spins < 100; ++spins) {
    auto [p, n] = ch.peek(1 << 20);
    got.insert(got.end(), p, p + n);
    ch.consume(n);
  }
  ::close(a);
  return got;
}

}  // namespace

TEST(handshake_session_keys_pair_up_per_direction) {
  auto run = [](Handshake& c, Handshake& a) {
    while (!c.done() || !a.done()) {
      auto out = c.take_output();
      if (!out.empty()) a.on_input(out.data());
      out = a.take_output();
      if (!out.empty()) c.on_input(out.data());
    }
  };
  Handshake c = Handshake::connector("s", 2, 0), a = Handshake::acceptor("s", 0, 3);
  run(c, a);
  CHECK(c.session_keys().send == a.session_keys().recv);
  CHECK(c.session_keys().recv == a.session_keys().send);
  CHECK(c.session_keys().send != c.session_keys().recv);
  Handshake c2 = Handshake::connector("s", 2, 0), a2 = Handshake::acceptor("s", 0, 3);
  run(c2, a2);
  CHECK(c2.session_keys().send != c.session_keys().send);  // fresh nonces, fresh keys
}

TEST(aead_channel_carries_a_stream) {
  CHECK(AesGcm::available());  // libcrypto.so.3 comes with every Python that has ssl
  auto [a, b] = socket_pair();
  AeadChannel left(std::make_unique<TcpChannel>(a), key(1), key(2));
  AeadChannel right(std::make_unique<TcpChannel>(b), key(2), key(1));
  std::vector<uint8_t> data(3 * AeadChannel::kFrameBytes + 12345);
  std::mt19937 rng(7);
  for (auto& x : data) x = static_cast<uint8_t>(rng());
  CHECK(stream(left, right, data) == data);
  std::vector<uint8_t> back(1000, 9);
  CHECK(stream(right, left, back) == back);
}

TEST(aead_channel_refuses_altered_replayed_and_reordered_frames) {
  CHECK(AesGcm::available());
  const std::vector<uint8_t> one(100, 5), two(60, 7);
  auto frames = frames_of({one, two});
  std::vector<uint8_t> both = one;
  both.insert(both.end(), two.begin(), two.end());
  CHECK(receive(joined(frames)) == both);
  CHECK(std::search(frames[0].begin(), frames[0].end(), one.begin(), one.begin() + 16) == frames[0].end());
  for (size_t at : {size_t(0), size_t(4), frames[0].size() / 2, frames[0].size() - 1}) {
    auto bad = frames;
    bad[0][at] ^= 0x40;  // length, ciphertext or tag altered
    CHECK_THROWS_KIND(receive(joined(bad)), ErrorKind::PeerFailure);
  }
  CHECK_THROWS_KIND(receive(joined({frames[0], frames[0]})), ErrorKind::PeerFailure);  // replayed
  CHECK_THROWS_KIND(receive(joined({frames[1], frames[0]})), ErrorKind::PeerFailure);  // reordered
  CHECK_THROWS_KIND(receive(joined({frames[1]})), ErrorKind::PeerFailure);             // one dropped
}
