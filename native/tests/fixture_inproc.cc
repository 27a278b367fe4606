#include <cstring>
#include <mutex>
#include <string>
#include <thread>

#include "common/error.h"
#include "tests/fixture.h"
#include "tests/harness.h"

namespace ring_test {
namespace {

// A byte ring shared by one writer thread and one reader thread.
struct Pipe {
  explicit Pipe(size_t cap) : buf(cap) {}
  std::mutex mu;
  std::vector<uint8_t> buf;
  size_t head = 0;  // total bytes written
  size_t tail = 0;  // total bytes consumed
  bool closed = false;
};

class InprocChannel : public ring::Channel {
 public:
  InprocChannel(std::shared_ptr<Pipe> out, std::shared_ptr<Pipe> in) : out_(std::move(out)), in_(std::move(in)) {}

  size_t try_write(const uint8_t* data, size_t len) override {
    std::lock_guard<std::mutex> lock(out_->mu);
    if (out_->closed) ring::throw_error(ring::ErrorKind::PeerFailure, "in-process channel closed");
    size_t cap = out_->buf.size();
    size_t space = cap - (out_->head - out_->tail);
    size_t pos = out_->head % cap;
    size_t n = std::min({len, space, cap - pos});
    std::memcpy(out_->buf.data() + pos, data, n);
    out_->head += n;
    return n;
  }

  std::pair<const uint8_t*, size_t> peek(size_t max) override {
    std::lock_guard<std::mutex> lock(in_->mu);
    size_t cap = in_->buf.size();
    size_t avail = in_->head - in_->tail;
    if (avail == 0 && in_->closed) ring::throw_error(ring::ErrorKind::PeerFailure, "in-process channel closed");
    size_t pos = in_->tail % cap;
    size_t n = std::min({max, avail, cap - pos});
    return {n ? in_->buf.data() + pos : nullptr, n};
  }

  void consume(size_t n) override {
    std::lock_guard<std::mutex> lock(in_->mu);
    in_->tail += n;
  }

  void close() override {
    std::lock_guard<std::mutex> lock(out_->mu);
    out_->closed = true;
  }

 private:
  std::shared_ptr<Pipe> out_, in_;
};

}  // namespace

const char* wire_name(Wire w) {
  switch (w) {
    case Wire::Inproc: return "inproc";
    case Wire::Shm: return "shm";
    case Wire::Tcp: return "tcp";
  }
  return "?";
}

std::vector<std::unique_ptr<ring::Mesh>> make_inproc_meshes(int n, size_t ring_bytes) {
  // pipes[i][j] carries bytes from i to j.
  std::vector<std::vector<std::shared_ptr<Pipe>>> pipes(n, std::vector<std::shared_ptr<Pipe>>(n));
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j)
      if (i != j) pipes[i][j] = std::make_shared<Pipe>(ring_bytes);
  std::vector<std::unique_ptr<ring::Mesh>> meshes;
  for (int r = 0; r < n; ++r) {
    std::vector<std::unique_ptr<ring::Channel>> channels(n);
    std::vector<std::string> names(n);
    for (int p = 0; p < n; ++p) {
      names[p] = "rank " + std::to_string(p);
      if (p != r) channels[p] = std::make_unique<InprocChannel>(pipes[r][p], pipes[p][r]);
    }
    meshes.push_back(std::make_unique<ring::Mesh>(r, n, std::move(channels), std::move(names)));
  }
  return meshes;
}

void run_ranks(std::vector<std::unique_ptr<ring::Mesh>>& meshes, const std::function<void(ring::Mesh&)>& fn) {
  std::vector<std::thread> threads;
  for (auto& m : meshes) {
    ring::Mesh* mesh = m.get();
    threads.emplace_back([mesh, &fn] {
      try {
        fn(*mesh);
      } catch (const std::exception& e) {
        record_failure(__FILE__, __LINE__, "rank " + std::to_string(mesh->rank()) + " threw: " + e.what());
      }
    });
  }
  for (auto& t : threads) t.join();
}

HostMeshes host_meshes(ring::Mesh& m, int hosts, int per_host) {
  std::vector<int> local, cross;
  const int host = m.rank() / per_host, l = m.rank() % per_host;
  for (int i = 0; i < per_host; ++i) local.push_back(host * per_host + i);
  for (int c = 0; c < hosts; ++c) cross.push_back(c * per_host + l);
  return {m.subgroup(local), m.subgroup(cross)};
}

void run_ranks(int n, const std::function<void(ring::Mesh&)>& fn) {
  auto meshes = make_inproc_meshes(n);
  run_ranks(meshes, fn);
}

}  // namespace ring_test
