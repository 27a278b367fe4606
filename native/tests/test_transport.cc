// The real transports: SHA-256/HMAC vectors, the handshake, shared memory
// and TCP meshes over a grid of world sizes and message sizes, strangers on
// the listener, dead peers, shared-memory cleanup and endpoint validation.
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <thread>

#include "common/error.h"
#include "tests/fixture.h"
#include "tests/harness.h"
#include "transport/doorbell.h"
#include "transport/handshake.h"
#include "transport/mesh_builder.h"
#include "transport/sha256.h"
#include "transport/shm_channel.h"
#include "transport/tcp_channel.h"
#include "transport/waiter.h"

using ring::ErrorKind;
using ring::Handshake;
using ring::Mesh;
using ring::MeshBuilder;
using ring::MeshOptions;
using ring_test::Wire;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

std::string random_hex(size_t n) {
  std::vector<uint8_t> raw(n);
  ring::random_bytes(raw.data(), n);
  return ring::to_hex(raw.data(), n);
}

bool shm_exists(const std::string& job_id, int rank) {
  struct stat st;
  return ::stat(("/dev/shm" + ring::shm_segment_name(job_id, rank)).c_str(), &st) == 0;
}

int endpoint_port(const std::string& ep) {
  size_t p = ep.find(";port=");
  return p == std::string::npos ? -1 : std::stoi(ep.substr(p + 6));
}

// n MeshBuilders of one job, driven step by step by a test.
struct TestJob {
  std::string secret = random_hex(16), job_id = "tj-" + random_hex(6);
  std::vector<std::unique_ptr<MeshBuilder>> builders;
  std::vector<std::string> endpoints;
  std::vector<std::exception_ptr> errors;

  TestJob(int n, bool tcp, double timeout_s = 10, std::vector<std::string> host_ids = {}, size_t ring_bytes = 100003)
      : errors(n) {
    for (int r = 0; r < n; ++r) {
      MeshOptions o;
      o.rank = r;
      o.size = n;
      o.secret = secret;
      o.job_id = job_id;
      o.host_id = host_ids.empty() ? "h" : host_ids[r];
      o.force_tcp = tcp;
      o.shm_ring_bytes = ring_bytes;
      o.connect_timeout_s = timeout_s;
      builders.push_back(std::make_unique<MeshBuilder>(o));
      endpoints.push_back(builders.back()->local_endpoint());
    }
  }
  std::thread connect_async(int r) {
    return std::thread([this, r] {
      try {
        builders[r]->connect(endpoints);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  std::vector<std::unique_ptr<Mesh>> connect_all() {
    std::vector<std::thread> ts;
    for (size_t r = 0; r < builders.size(); ++r) ts.push_back(connect_async(static_cast<int>(r)));
    for (auto& t : ts) t.join();
    return finish();
  }
  std::vector<std::unique_ptr<Mesh>> finish() {
    for (auto& e : errors)
      if (e) std::rethrow_exception(e);
    std::vector<std::unique_ptr<Mesh>> meshes;
    for (auto& b : builders) {
      b->finalize();
      meshes.push_back(b->build());
      meshes.back()->set_timeout(10);
    }
    return meshes;
  }
};

uint8_t pattern(size_t i, int from, int to, size_t len) {
  return static_cast<uint8_t>((i * 131 + len * 7 + from * 31 + to * 17) >> (i % 3));
}

std::vector<uint8_t> message(int from, int to, size_t len) {
  std::vector<uint8_t> v(len);
  for (size_t i = 0; i < len; ++i) v[i] = pattern(i, from, to, len);
  return v;
}

// Ring steps of several sizes, then a message between every ordered pair.
void exercise_mesh(Mesh& m) {
  int n = m.size(), r = m.rank();
  if (n == 1) return;
  for (size_t len : {size_t(0), size_t(1), size_t(7), size_t(1001), size_t((4 << 20) + 3)}) {
    int right = (r + 1) % n, left = (r + n - 1) % n;
    std::vector<uint8_t> out = message(r, right, len), in(len, 0xEE);
    m.sendrecv(right, out.data(), len, left, in.data(), len);
    CHECK(in == message(left, r, len));
  }
  for (int k = 1; k < n; ++k) {
    int to = (r + k) % n, from = (r + n - k) % n;
    size_t slen = 17 * r + 3 * to + 1, rlen = 17 * from + 3 * r + 1;
    std::vector<uint8_t> out = message(r, to, slen), in(rlen);
    m.sendrecv(to, out.data(), slen, from, in.data(), rlen);
    CHECK(in == message(from, r, rlen));
    m.send_msg(to, message(to, r, k));
    CHECK(m.recv_msg(from, 1 << 20) == message(r, from, k));
  }
}

// Moves handshake frames between two state machines in memory until both
// are stuck; `sent_by_a` records a's bytes (a replayable transcript).
void pump(Handshake& a, Handshake& b, std::vector<uint8_t>* sent_by_a = nullptr) {
  std::vector<uint8_t> ab, ba;
  for (bool moved = true; moved;) {
    moved = false;
    for (auto [from, to, q] : {std::make_tuple(&a, &b, &ab), std::make_tuple(&b, &a, &ba)}) {
      std::vector<uint8_t> out = from->take_output();
      if (from == &a && sent_by_a) sent_by_a->insert(sent_by_a->end(), out.begin(), out.end());
      q->insert(q->end(), out.begin(), out.end());
      size_t need = to->expected_input();
      if (need > 0 && q->size() >= need) {
        to->on_input(q->data());
        q->erase(q->begin(), q->begin() + static_cast<long>(need));
        moved = true;
      }
      moved = moved || !out.empty();
    }
  }
}

}  // namespace

TEST(sha256_fips_vectors) {
  auto hex = [](const std::string& s) { return ring::to_hex(ring::sha256(s.data(), s.size())); };
  CHECK_EQ(hex(""), std::string("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"));
  CHECK_EQ(hex("abc"), std::string("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"));
  CHECK_EQ(hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
           std::string("248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"));
  CHECK_EQ(hex("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmn"
               "opqrstnopqrstu"),
           std::string("cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"));
  std::string million(1000000, 'a');
  CHECK_EQ(hex(million), std::string("cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"));
  ring::Sha256 h;  // the same, fed in odd pieces across block boundaries
  for (size_t i = 0; i < million.size(); i += 997) h.update(million.data() + i, std::min<size_t>(997, million.size() - i));
  CHECK_EQ(ring::to_hex(h.finish()), hex(million));
}

TEST(hmac_sha256_rfc4231_vectors) {
  auto mac = [](const std::string& k, const std::string& d) { return ring::to_hex(ring::hmac_sha256(k, d)); };
  CHECK_EQ(mac(std::string(20, '\x0b'), "Hi There"),
           std::string("b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"));
  CHECK_EQ(mac("Jefe", "what do ya want for nothing?"),
           std::string("5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"));
  CHECK_EQ(mac(std::string(20, '\xaa'), std::string(50, '\xdd')),
           std::string("773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"));
  std::string key4;
  for (int i = 1; i <= 25; ++i) key4 += static_cast<char>(i);
  CHECK_EQ(mac(key4, std::string(50, '\xcd')),
           std::string("82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"));
  CHECK_EQ(mac(std::string(20, '\x0c'), "Test With Truncation").substr(0, 32),
           std::string("a3b6167473100ee06e0c796c2955552b"));
  CHECK_EQ(mac(std::string(131, '\xaa'), "Test Using Larger Than Block-Size Key - Hash Key First"),
           std::string("60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"));
  CHECK_EQ(mac(std::string(131, '\xaa'),
               "This is a test using a larger than block-size key and a larger than block-size data. The key needs to "
               "be hashed before being used by the HMAC algorithm."),
           std::string("9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"));
}

TEST(handshake_authenticates_both_sides) {
  Handshake c = Handshake::connector("s3cret", 3, 1), a = Handshake::acceptor("s3cret", 1, 4);
  pump(c, a);
  CHECK(c.done());
  CHECK(a.done());
  CHECK_EQ(a.peer_rank(), 3);
}

TEST(handshake_rejects_wrong_secret_replay_and_reflection) {
  // Wrong secret: the connector refuses the acceptor's MAC...
  Handshake c1 = Handshake::connector("wrong", 1, 0), a1 = Handshake::acceptor("right", 0, 2);
  bool thrown = false;
  try { pump(c1, a1); } catch (const ring::HandshakeError&) { thrown = true; }
  CHECK(thrown && !a1.done());
  // ...and the acceptor refuses a proof not made with its secret.
  std::vector<uint8_t> transcript;
  Handshake c2 = Handshake::connector("right", 1, 0), a2 = Handshake::acceptor("right", 0, 2);
  pump(c2, a2, &transcript);
  CHECK(a2.done());
  CHECK_EQ(transcript.size(), Handshake::kHelloBytes + Handshake::kProofBytes);
  Handshake a3 = Handshake::acceptor("right", 0, 2);
  a3.on_input(transcript.data());  // replayed Hello is fine, the nonce it gets back is new
  std::vector<uint8_t> reply = a3.take_output();
  CHECK_EQ(reply.size(), Handshake::kReplyBytes);
  thrown = false;
  try { a3.on_input(transcript.data() + Handshake::kHelloBytes); } catch (const ring::HandshakeError&) { thrown = true; }
  CHECK(thrown && !a3.done());
  // Reflection: the acceptor's own MAC is no proof of the connector's.
  Handshake a4 = Handshake::acceptor("right", 0, 2);
  a4.on_input(transcript.data());
  std::vector<uint8_t> reply4 = a4.take_output();
  thrown = false;
  try { a4.on_input(reply4.data() + 32); } catch (const ring::HandshakeError&) { thrown = true; }
  CHECK(thrown);
}

TEST(handshake_rejects_malformed_hello) {
  Handshake good = Handshake::connector("k", 2, 1);
  std::vector<uint8_t> hello = good.take_output();
  auto rejected = [](std::vector<uint8_t> h, int my_rank, int size) {
    Handshake a = Handshake::acceptor("k", my_rank, size);
    try { a.on_input(h.data()); } catch (const ring::HandshakeError&) { return true; }
    return false;
  };
  CHECK(!rejected(hello, 1, 3));
  CHECK(rejected(hello, 0, 3));  // meant for rank 1
  CHECK(rejected(hello, 1, 2));  // rank 2 is not in a job of 2
  CHECK(rejected(hello, 2, 3));  // a lower (here: equal) rank never dials
  auto bad_magic = hello;
  bad_magic[0] = 'X';
  CHECK(rejected(bad_magic, 1, 3));
  auto bad_version = hello;
  bad_version[5] = 99;
  CHECK(rejected(bad_version, 1, 3));
}

TEST(shm_and_tcp_ring_and_all_pairs) {
  for (Wire w : {Wire::Shm, Wire::Tcp}) {
    for (int n : {1, 2, 3, 5, 8}) {
      auto meshes = ring_test::make_meshes(w, n);
      CHECK_EQ((int)meshes.size(), n);
      for (auto& m : meshes) m->set_timeout(10);
      ring_test::run_ranks(meshes, exercise_mesh);
    }
  }
}

TEST(shm_tiny_odd_ring_wraps_correctly) {
  // 67-byte rings: every message wraps many times, at every offset.
  TestJob job(3, false, 10, {}, 67);
  auto meshes = job.connect_all();
  ring_test::run_ranks(meshes, [](Mesh& m) {
    int n = m.size(), r = m.rank(), right = (r + 1) % n, left = (r + n - 1) % n;
    for (size_t len : {size_t(1), size_t(66), size_t(67), size_t(68), size_t(100001)}) {
      std::vector<uint8_t> out = message(r, right, len), in(len);
      m.sendrecv(right, out.data(), len, left, in.data(), len);
      CHECK(in == message(left, r, len));
    }
  });
}

TEST(mixed_hosts_use_shm_within_and_tcp_across) {
  TestJob job(4, false, 10, {"host-a", "host-a", "host-b", "host-b"});
  auto meshes = job.connect_all();
  ring_test::run_ranks(meshes, exercise_mesh);
  CHECK(meshes[0]->peer_name(2).find("rank 2 (") == 0);
}

namespace {

int dial(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

void send_all(int fd, const std::vector<uint8_t>& v) {
  for (size_t off = 0; off < v.size();) {
    ssize_t n = ::send(fd, v.data() + off, v.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

// Reads until EOF or `timeout_s`; *eof tells which.
std::vector<uint8_t> read_to_eof(int fd, double timeout_s, bool* eof) {
  std::vector<uint8_t> got;
  auto start = std::chrono::steady_clock::now();
  *eof = false;
  while (seconds_since(start) < timeout_s) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    uint8_t buf[256];
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) {
      *eof = true;
      break;
    }
    got.insert(got.end(), buf, buf + n);
  }
  return got;
}

}  // namespace

TEST(tcp_listener_drops_strangers_and_still_connects) {
  TestJob job(2, true);
  int port = endpoint_port(job.endpoints[0]);
  CHECK(port > 0);
  std::thread rank0 = job.connect_async(0);

  std::vector<int> silent;  // connect and never say a word; more than the listener keeps pending
  for (int i = 0; i < 80; ++i) silent.push_back(dial(port));
  CHECK(silent.back() >= 0);

  int garbage = dial(port);  // not a ring client at all
  send_all(garbage, std::vector<uint8_t>(Handshake::kHelloBytes, 'G'));
  bool eof = false;
  CHECK(read_to_eof(garbage, 3, &eof).empty() && eof);
  ::close(garbage);

  // A transcript recorded from a genuine rank 1 of this job, replayed.
  std::vector<uint8_t> transcript;
  Handshake c = Handshake::connector(job.secret, 1, 0), a = Handshake::acceptor(job.secret, 0, 2);
  pump(c, a, &transcript);
  int replay = dial(port);
  send_all(replay, transcript);
  CHECK_EQ(read_to_eof(replay, 3, &eof).size(), Handshake::kReplyBytes);  // a reply, never the Ack
  CHECK(eof);
  ::close(replay);

  // Wrong secret, honest client: it notices the acceptor's MAC is wrong.
  int wrong = dial(port);
  ::fcntl(wrong, F_SETFL, O_NONBLOCK);
  Handshake ws = Handshake::connector("not the secret", 1, 0);
  bool refused = false;
  try { ring::run_handshake(ws, wrong, 3); } catch (const ring::HandshakeError&) { refused = true; }
  CHECK(refused);
  ::close(wrong);

  // Wrong secret, pushy client: sends a made-up proof anyway; dropped.
  int pushy = dial(port);
  Handshake ps = Handshake::connector("not the secret", 1, 0);
  send_all(pushy, ps.take_output());
  std::vector<uint8_t> fake_proof(Handshake::kProofBytes, 7);
  send_all(pushy, fake_proof);
  CHECK_EQ(read_to_eof(pushy, 3, &eof).size(), Handshake::kReplyBytes);
  CHECK(eof);
  ::close(pushy);

  // The real rank 1 still gets in, without waiting out the silent strangers.
  auto start = std::chrono::steady_clock::now();
  std::thread rank1 = job.connect_async(1);
  rank1.join();
  rank0.join();
  CHECK(seconds_since(start) < ring::kHandshakeTimeoutSeconds - 1);
  for (int fd : silent) ::close(fd);
  auto meshes = job.finish();
  ring_test::run_ranks(meshes, exercise_mesh);
}

TEST(closed_peer_is_peer_failure) {
  for (Wire w : {Wire::Shm, Wire::Tcp}) {
    auto meshes = ring_test::make_meshes(w, 2);
    for (auto& m : meshes) m->set_timeout(10);
    std::vector<uint8_t> last = message(1, 0, 1001), in(1001), big(8 << 20);
    meshes[1]->send(0, last.data(), last.size());
    meshes[1]->close();
    meshes[0]->recv(1, in.data(), in.size());  // sent before the close: still delivered
    CHECK(in == last);
    std::string what;
    try {
      meshes[0]->recv(1, in.data(), 10);
    } catch (const ring::RingError& e) {
      CHECK(e.kind() == ErrorKind::PeerFailure);
      what = e.what();
    }
    CHECK(what.find("rank 1") != std::string::npos && what.find("close") != std::string::npos);
    CHECK_THROWS_KIND(meshes[0]->send(1, big.data(), big.size()), ErrorKind::PeerFailure);
  }
}

namespace {

bool read_exact(int fd, void* buf, size_t len, double timeout_s) {
  auto start = std::chrono::steady_clock::now();
  uint8_t* p = static_cast<uint8_t*>(buf);
  while (len > 0 && seconds_since(start) < timeout_s) {
    pollfd pf{fd, POLLIN, 0};
    if (::poll(&pf, 1, 50) <= 0) continue;
    ssize_t n = ::read(fd, p, len);
    if (n <= 0) return false;
    p += n;
    len -= static_cast<size_t>(n);
  }
  return len == 0;
}

// Rank 1 of a job of two in a forked child: connects, sends 5 bytes and
// exits without closing anything. Never returns.
[[noreturn]] void child_rank(MeshOptions o, const std::string& ep0, int to_parent, int from_parent) {
  int rc = 1;
  try {
    MeshBuilder b(o);
    std::string ep1 = b.local_endpoint();
    uint32_t len = static_cast<uint32_t>(ep1.size());
    if (::write(to_parent, &len, 4) == 4 && ::write(to_parent, ep1.data(), len) == (ssize_t)len) {
      b.connect({ep0, ep1});
      char go;
      if (read_exact(from_parent, &go, 1, 10)) {  // the parent has connected too
        b.finalize();
        auto mesh = b.build();
        mesh->send(0, "hello", 5);
        ::_exit(0);  // before ~Mesh could close the channels
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "  child rank 1 (pid %d): %s\n", static_cast<int>(::getpid()), e.what());
  }
  ::_exit(rc);  // no destructors: the process just vanishes
}

}  // namespace

TEST(exited_peer_process_is_peer_failure) {
  for (bool tcp : {false, true}) {
    MeshOptions o;
    o.size = 2;
    o.secret = random_hex(16);
    o.job_id = "fork-" + random_hex(6);
    o.host_id = "h";
    o.force_tcp = tcp;
    o.shm_ring_bytes = 65536;
    o.connect_timeout_s = 10;
    MeshBuilder b0(o);
    std::string ep0 = b0.local_endpoint();
    int up[2], down[2];
    CHECK(::pipe(up) == 0 && ::pipe(down) == 0);
    MeshOptions o1 = o;
    o1.rank = 1;
    pid_t pid = ::fork();
    if (pid == 0) child_rank(o1, ep0, up[1], down[0]);
    uint32_t len = 0;
    std::string ep1;
    if (read_exact(up[0], &len, 4, 10) && len < 4096) {
      ep1.resize(len);
      read_exact(up[0], &ep1[0], len, 10);
    }
    std::string what;
    try {
      b0.connect({ep0, ep1});
      CHECK(::write(down[1], "g", 1) == 1);
      b0.finalize();
      auto mesh = b0.build();
      mesh->set_timeout(10);
      char buf[5];
      mesh->recv(1, buf, 5);
      CHECK(std::memcmp(buf, "hello", 5) == 0);
      mesh->recv(1, buf, 5);  // the child is a zombie by now, or soon
    } catch (const ring::RingError& e) {
      CHECK(e.kind() == ErrorKind::PeerFailure);
      what = e.what();
    }
    std::string expected = tcp ? "closed by peer" : "process " + std::to_string(pid) + " exited";
    if (what.find(expected) == std::string::npos) ring_test::record_failure(__FILE__, __LINE__, "got: " + what);
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
      ring_test::record_failure(__FILE__, __LINE__, "child rank failed, wait status " + std::to_string(status));
    for (int fd : {up[0], up[1], down[0], down[1]}) ::close(fd);
  }
}

TEST(shm_names_removed_after_finalize_or_destruction) {
  {
    TestJob job(3, false);
    for (int r = 0; r < 3; ++r) CHECK(shm_exists(job.job_id, r));
    auto meshes = job.connect_all();  // finalizes
    for (int r = 0; r < 3; ++r) CHECK(!shm_exists(job.job_id, r));
    ring_test::run_ranks(meshes, exercise_mesh);  // the mappings outlive the names
  }
  std::string job_id;
  {
    TestJob job(2, false, 0.2);
    job_id = job.job_id;
    CHECK(shm_exists(job_id, 0) && shm_exists(job_id, 1));
    // Rank 0 connects alone and times out waiting for rank 1 to attach;
    // neither is finalized.
    std::string what;
    try {
      job.builders[0]->connect(job.endpoints);
    } catch (const ring::RingError& e) {
      CHECK(e.kind() == ErrorKind::Timeout);
      what = e.what();
    }
    if (what.find("rank 1 (") == std::string::npos || what.find("has not opened") == std::string::npos)
      ring_test::record_failure(__FILE__, __LINE__, "got: " + what);
  }
  CHECK(!shm_exists(job_id, 0) && !shm_exists(job_id, 1));
  {
    TestJob job(2, true);  // force_tcp: no segment at all
    job_id = job.job_id;
    CHECK(!shm_exists(job_id, 0));
  }
}

TEST(size_one_needs_no_listener_or_segment) {
  MeshOptions o;
  o.job_id = "solo-" + random_hex(4);
  MeshBuilder b(o);
  std::string ep = b.local_endpoint();
  CHECK_EQ(endpoint_port(ep), 0);
  CHECK(!shm_exists(o.job_id, 0));
  b.connect({ep});
  b.finalize();
  auto mesh = b.build();
  CHECK_EQ(mesh->size(), 1);
  for (Wire w : {Wire::Shm, Wire::Tcp}) CHECK_EQ(ring_test::make_meshes(w, 1)[0]->size(), 1);
}

TEST(malformed_endpoints_and_options_are_bad_argument) {
  TestJob job(2, false, 0.5);
  MeshBuilder& b = *job.builders[0];
  std::string ep0 = job.endpoints[0], ep1 = job.endpoints[1];
  auto replaced = [&](const std::string& from, const std::string& to) {
    std::string s = ep1;
    size_t p = s.find(from);
    return p == std::string::npos ? std::string("missing ") + from : s.replace(p, from.size(), to);
  };
  for (const std::string& bad :
       {std::string(""), std::string("garbage"), std::string("ring2") + ep1.substr(5), ep0,
        replaced(";pid=", ";pid=x"), replaced(";port=", ";port=99999"), replaced(";host_id=h", ";host_id=%G0"),
        replaced(";shm=", ";shm=%2Fetc%2F"), replaced(";shm=", ";bogus=1;shm="), ep1 + ";"}) {
    CHECK_THROWS_KIND(b.connect({ep0, bad}), ErrorKind::BadArgument);
  }
  CHECK_THROWS_KIND(b.connect({ep0}), ErrorKind::BadArgument);
  CHECK_THROWS_KIND(b.connect({ep1, ep1}), ErrorKind::BadArgument);
  auto options = [](int rank, int size, std::string secret, std::string job_id) {
    MeshOptions o;
    o.rank = rank;
    o.size = size;
    o.secret = secret;
    o.job_id = job_id;
    return o;
  };
  CHECK_THROWS_KIND(MeshBuilder(options(2, 2, "s", "j")), ErrorKind::BadArgument);
  CHECK_THROWS_KIND(MeshBuilder(options(0, 2, "", "j")), ErrorKind::BadArgument);
  CHECK_THROWS_KIND(MeshBuilder(options(0, 2, "s", "a/b")), ErrorKind::BadArgument);
  CHECK_THROWS_KIND(MeshBuilder(options(0, 2, "s", "")), ErrorKind::BadArgument);
}

TEST(connect_timeout_names_missing_peers) {
  {
    TestJob job(3, true, 0.3);  // ranks 0 and 2 never call connect()
    std::string what;
    try {
      job.builders[1]->connect(job.endpoints);
    } catch (const ring::RingError& e) {
      CHECK(e.kind() == ErrorKind::Timeout);
      what = e.what();
    }
    for (const char* part : {"rank 1 (this process)", "rank 0 (could not connect", "handshake",
                             "rank 2 (it has not connected"})
      if (what.find(part) == std::string::npos) ring_test::record_failure(__FILE__, __LINE__, what);
  }
  {
    TestJob job(2, true, 0.3);
    job.builders[0].reset();  // rank 0's listener is gone: refused
    std::string what;
    try {
      job.builders[1]->connect(job.endpoints);
    } catch (const ring::RingError& e) {
      what = e.what();
    }
    if (what.find("refused") == std::string::npos) ring_test::record_failure(__FILE__, __LINE__, what);
  }
}

TEST(doorbell_loses_no_wakeup) {
  // Two threads take turns 20000 times, each sleeping on its own doorbell
  // until the other rings it: a lost wake-up would show as a timeout.
  ring::Doorbell bells[2];
  std::atomic<uint64_t> turn{0};
  std::atomic<int> timeouts{0};
  constexpr uint64_t kRounds = 20000;
  auto player = [&](int me) {
    for (uint64_t k = 0; k < kRounds; ++k) {
      const uint64_t mine = 2 * k + me;
      auto my_turn = [&] { return turn.load(std::memory_order_acquire) == mine; };
      while (!my_turn())
        if (!ring::sleep_on_doorbell(&bells[me], 10.0, my_turn)) ++timeouts;
      turn.store(mine + 1, std::memory_order_release);
      ring::ring_doorbell(&bells[1 - me]);
    }
  };
  std::thread other(player, 1);
  player(0);
  other.join();
  CHECK_EQ(timeouts.load(), 0);
  CHECK_EQ(turn.load(), 2 * kRounds);
}

TEST(shm_ranks_without_spin_block_on_the_doorbell) {
  // As on an oversubscribed host: waits go to the doorbell at once. A ring
  // of 3 passes small and large messages (full rings: writers wait for
  // space) and every result is right.
  ring::Backoff::set_spin(false);
  auto meshes = ring_test::make_meshes(Wire::Shm, 3);
  for (auto& m : meshes) m->set_timeout(10);
  ring_test::run_ranks(meshes, [](Mesh& m) {
    int n = m.size(), r = m.rank(), right = (r + 1) % n, left = (r + n - 1) % n;
    for (int round = 0; round < 300; ++round) {
      size_t len = round % 10 == 0 ? size_t(3) << 20 : size_t(8 + round);
      std::vector<uint8_t> out = message(r, right, len), in(len);
      m.sendrecv(right, out.data(), len, left, in.data(), len);
      CHECK(in == message(left, r, len));
    }
  });
  ring::Backoff::set_spin(true);
}
