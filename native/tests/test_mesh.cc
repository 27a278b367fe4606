// The Mesh progress loop over in-process channels.
#include <cstring>
#include <numeric>
#include <vector>

#include "common/error.h"
#include "tests/fixture.h"
#include "tests/harness.h"

using ring::Mesh;

TEST(mesh_ring_sendrecv_large) {
  // Every rank sends 1 MB right and receives 1 MB from the left through a
  // 1021-byte pipe: only a concurrent send/receive loop finishes.
  for (int n : {2, 3, 5}) {
    ring_test::run_ranks(n, [n](Mesh& m) {
      size_t len = 1 << 20;
      std::vector<uint8_t> out(len), in(len);
      for (size_t i = 0; i < len; ++i) out[i] = static_cast<uint8_t>(i * 7 + m.rank());
      int right = (m.rank() + 1) % n, left = (m.rank() + n - 1) % n;
      m.sendrecv(right, out.data(), len, left, in.data(), len);
      for (size_t i = 0; i < len; i += 4099) CHECK_EQ((int)in[i], (int)static_cast<uint8_t>(i * 7 + left));
    });
  }
}

TEST(mesh_sink_granule_never_splits_elements) {
  ring_test::run_ranks(2, [](Mesh& m) {
    size_t count = 100003;
    std::vector<double> out(count), in(count, 0.0);
    std::iota(out.begin(), out.end(), m.rank() * 1e6);
    int peer = 1 - m.rank();
    size_t expected_offset = 0;
    m.sendrecv_sink(peer, out.data(), count * 8, peer, count * 8, 8,
                    [&](const uint8_t* data, size_t offset, size_t len) {
                      CHECK_EQ(offset, expected_offset);
                      CHECK_EQ(len % 8, (size_t)0);
                      std::memcpy(reinterpret_cast<uint8_t*>(in.data()) + offset, data, len);
                      expected_offset += len;
                    });
    CHECK_EQ(expected_offset, count * 8);
    CHECK_EQ(in[12345], peer * 1e6 + 12345);
  });
}

TEST(mesh_messages_and_limit) {
  ring_test::run_ranks(2, [](Mesh& m) {
    if (m.rank() == 0) {
      m.send_msg(1, std::vector<uint8_t>{1, 2, 3});
      uint8_t header[8] = {0x88, 0x13, 0, 0, 0, 0, 0, 0};  // announces 5000 bytes, sends none
      m.send(1, header, 8);
    } else {
      auto a = m.recv_msg(0, 100);
      CHECK_EQ(a.size(), (size_t)3);
      CHECK_THROWS_KIND(m.recv_msg(0, 100), ring::ErrorKind::Internal);
    }
  });
}

TEST(mesh_messages_split_by_a_small_pipe) {
  // Messages of every length class (empty, short, longer than the 1021-byte
  // pipe, padded ones from 4096 bytes on) back to back, with a data
  // transfer between them: a message the channel takes or holds whole goes
  // in one step, one it splits goes on through the transfer loop, and the
  // stream stays in step on both sides.
  auto bytes = [](size_t len, size_t salt) {
    std::vector<uint8_t> v(len);
    for (size_t i = 0; i < len; ++i) v[i] = static_cast<uint8_t>(i * 31 + salt);
    return v;
  };
  ring_test::run_ranks(2, [&](Mesh& m) {
    for (size_t k = 0; k < 120; ++k) {
      const size_t len = (k * 613) % 5200;
      if (m.rank() == 0) {
        m.send_msg(1, bytes(len, k));
        if (k % 7 == 0) m.send(1, bytes(k + 1, k).data(), k + 1);
      } else {
        CHECK(m.recv_msg(0, 1 << 20) == bytes(len, k));
        if (k % 7 == 0) {
          std::vector<uint8_t> in(k + 1);
          m.recv(0, in.data(), in.size());
          CHECK(in == bytes(k + 1, k));
        }
      }
    }
  });
}

TEST(mesh_closed_peer_is_peer_failure) {
  auto meshes = ring_test::make_inproc_meshes(2);
  meshes[1]->close();
  std::vector<uint8_t> buf(10);
  CHECK_THROWS_KIND(meshes[0]->recv(1, buf.data(), buf.size()), ring::ErrorKind::PeerFailure);
}

TEST(mesh_abort_and_timeout) {
  auto meshes = ring_test::make_inproc_meshes(2);
  std::vector<uint8_t> buf(10);
  meshes[0]->set_timeout(0.2);
  CHECK_THROWS_KIND(meshes[0]->recv(1, buf.data(), buf.size()), ring::ErrorKind::Timeout);
  meshes[0]->abort("stopped by test");
  CHECK_THROWS_KIND(meshes[0]->recv(1, buf.data(), buf.size()), ring::ErrorKind::PeerFailure);
}
