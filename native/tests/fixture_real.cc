// make_meshes over the real transports: n ranks as threads of this process,
// each with its own MeshBuilder, exactly as separate processes would use it
// except that endpoints are exchanged in memory instead of through a store.
#include <exception>
#include <thread>

#include "common/error.h"
#include "tests/fixture.h"
#include "transport/handshake.h"
#include "transport/mesh_builder.h"
#include "transport/sha256.h"

namespace ring_test {
namespace {

// Odd, smallish rings: wrap-around and partial spans happen in every test
// that moves more than a few hundred KiB.
constexpr size_t kTestShmRingBytes = (256 << 10) + 13;

std::string random_hex(size_t bytes) {
  std::string raw(bytes, '\0');
  ring::random_bytes(&raw[0], bytes);
  return ring::to_hex(reinterpret_cast<const uint8_t*>(raw.data()), bytes);
}

}  // namespace

std::vector<std::unique_ptr<ring::Mesh>> make_meshes(Wire wire, int n) {
  if (wire == Wire::Inproc) return make_inproc_meshes(n);
  std::string job_id = "test-" + random_hex(8);
  std::string secret = random_hex(32);
  std::vector<std::unique_ptr<ring::MeshBuilder>> builders;
  std::vector<std::string> endpoints;
  for (int r = 0; r < n; ++r) {
    ring::MeshOptions o;
    o.rank = r;
    o.size = n;
    o.secret = secret;
    o.job_id = job_id;
    o.host_id = "test-host";
    o.force_tcp = wire == Wire::Tcp;
    o.shm_ring_bytes = kTestShmRingBytes;
    o.connect_timeout_s = 10;
    builders.push_back(std::make_unique<ring::MeshBuilder>(o));
    endpoints.push_back(builders.back()->local_endpoint());  // never blocks
  }
  // connect() blocks until every peer is in, so the ranks need threads.
  std::vector<std::exception_ptr> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        builders[r]->connect(endpoints);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();  // the barrier before finalize()
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  std::vector<std::unique_ptr<ring::Mesh>> meshes;
  for (auto& b : builders) {
    b->finalize();
    meshes.push_back(b->build());
  }
  return meshes;
}

}  // namespace ring_test
