// Heartbeats on a control mesh, and the Mesh tick that sends them during
// long transfers.
#include <chrono>
#include <thread>
#include <vector>

#include "common/error.h"
#include "engine/heartbeats.h"
#include "tests/fixture.h"
#include "tests/harness.h"

using ring::Heartbeats;
using ring::Mesh;

namespace {

// Reads what `peer` sent to `m`: every message must be a heartbeat.
void drain(Mesh& m, Heartbeats& h, int peer) {
  while (m.readable(peer)) {
    h.heard(peer);
    CHECK(m.recv_msg(peer, 100).empty());
  }
}

}  // namespace

TEST(heartbeats_find_a_silent_socket_peer_and_spare_a_talking_one) {
  auto meshes = ring_test::make_meshes(ring_test::Wire::Tcp, 2);
  const double timeout = 0.3;
  for (auto& m : meshes) m->set_timeout(timeout);
  CHECK(Heartbeats::watched_peers(*meshes[0]) == std::vector<int>{1});
  CHECK(Heartbeats::watched_peers(*meshes[1]) == std::vector<int>{0});
  Heartbeats h0(meshes[0].get(), {1}, timeout), h1(meshes[1].get(), {0}, timeout);
  auto run_for = [&](double seconds, bool rank1_talks) {
    auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < end) {
      h0.send_due();
      if (rank1_talks) h1.send_due();
      drain(*meshes[0], h0, 1);
      drain(*meshes[1], h1, 0);
      h0.check();
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  };
  run_for(4 * timeout, true);  // both alive: no error, though nothing but heartbeats flows
  CHECK_THROWS_KIND(run_for(3 * timeout, false), ring::ErrorKind::PeerFailure);
}

TEST(heartbeats_watch_no_shared_memory_peer) {
  auto meshes = ring_test::make_meshes(ring_test::Wire::Shm, 3);
  for (auto& m : meshes) CHECK(Heartbeats::watched_peers(*m).empty());
}

TEST(mesh_tick_runs_during_a_long_transfer) {
  auto meshes = ring_test::make_inproc_meshes(2, 1021);
  int ticks = 0;
  meshes[0]->set_tick([&ticks] { ++ticks; }, 0.0);
  ring_test::run_ranks(meshes, [](Mesh& m) {
    std::vector<uint8_t> out(1 << 20, 7), in(1 << 20);
    m.sendrecv(1 - m.rank(), out.data(), out.size(), 1 - m.rank(), in.data(), in.size());
  });
  CHECK(ticks > 0);
}
