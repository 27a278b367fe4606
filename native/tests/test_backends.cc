// Backend selection (engine/executor.h, engine/backend.h): the Executor runs
// each response on the first backend enabled for it, the CPU ring serves
// host memory only, and the runtime refuses a device no backend serves.
#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "engine/backends/cpu_ring/cpu_ring.h"
#include "engine/executor.h"
#include "engine/mesh_names.h"
#include "engine/runtime.h"
#include "tests/fixture.h"
#include "tests/harness.h"
#include "transport/shm_channel.h"

using namespace ring;

namespace {

const Device kGpu{DeviceType::CUDA, 0};

// A second real backend: serves GPU memory and finishes each operation by
// completing its handles with an empty result (no data moves).
class CountingBackend : public Backend {
 public:
  explicit CountingBackend(HandleTable* handles) : handles_(handles) {}
  const char* name() const override { return "counting"; }
  bool serves(const Device& d) const override { return d == kGpu; }
  bool enabled(const Response& r) const override { return serves(r.device); }
  void execute(const Response&, std::vector<Entry>& entries) override {
    ++runs;
    for (auto& e : entries) handles_->complete(e.handle, OpResult{});
  }
  int runs = 0;

 private:
  HandleTable* handles_;
};

// An allreduce of `x` (4 floats) on `device`, pending on this rank, and the
// response that runs it.
Response pending_allreduce(HandleTable& handles, std::unordered_map<std::string, Entry>& pending, const char* name,
                           float* x, const Device& device) {
  Entry e;
  e.req.name = name;
  e.req.shape = {4};
  e.req.device = device;
  e.input = x;
  e.output = x;
  e.handle = handles.create(name);
  pending.emplace(name, e);
  Response r;
  r.names = {name};
  r.sizes = {4};
  r.device = device;
  return r;
}

}  // namespace

TEST(executor_runs_each_response_on_the_first_enabled_backend) {
  auto meshes = ring_test::make_inproc_meshes(1);
  HandleTable handles;
  Executor ex(&handles);
  auto counting = std::make_unique<CountingBackend>(&handles);
  CountingBackend* gpu = counting.get();
  ex.add_backend(std::move(counting));
  ex.add_backend(std::make_unique<CpuRingBackend>(meshes[0].get(), &handles));
  CHECK(ex.serves(Device{}));
  CHECK(ex.serves(kGpu));
  CHECK(!ex.serves(Device{DeviceType::CUDA, 1}));
  std::unordered_map<std::string, Entry> pending;
  float x[4] = {1, 2, 3, 4};
  Response on_cpu = pending_allreduce(handles, pending, "c", x, Device{});
  const int64_t on_cpu_handle = pending.at("c").handle;
  ex.run(on_cpu, pending);
  CHECK_EQ(gpu->runs, 0);
  OpResult res = handles.release(on_cpu_handle);
  CHECK_EQ(res.shape.size(), (size_t)1);
  CHECK_EQ(x[3], 4.0f);  // one rank: the sum is the input
  Response on_gpu = pending_allreduce(handles, pending, "g", x, kGpu);
  const int64_t on_gpu_handle = pending.at("g").handle;
  ex.run(on_gpu, pending);
  CHECK_EQ(gpu->runs, 1);
  CHECK(handles.poll(on_gpu_handle));
  CHECK(pending.empty());
}

TEST(executor_without_a_backend_for_the_device_fails_cleanly) {
  auto meshes = ring_test::make_inproc_meshes(1);
  HandleTable handles;
  Executor ex(&handles);
  ex.add_backend(std::make_unique<CpuRingBackend>(meshes[0].get(), &handles));
  CHECK(ex.serves(Device{}));
  CHECK(!ex.serves(kGpu));
  std::unordered_map<std::string, Entry> pending;
  float x[4] = {};
  Response r = pending_allreduce(handles, pending, "g", x, kGpu);
  std::string what;
  try {
    ex.run(r, pending);
  } catch (const RingError& e) {
    CHECK(e.kind() == ErrorKind::Internal);
    what = e.what();
  }
  CHECK(what.find("no backend runs allreduce on device cuda:0") != std::string::npos);
}

TEST(runtime_refuses_a_device_no_backend_serves) {
  RuntimeOptions o;
  o.job_id = "backend-test";
  Runtime rt(o);
  rt.connect({rt.local_endpoint()});
  rt.start();
  float x[4] = {1, 2, 3, 4};
  EnqueueArgs args;
  args.req.name = "t";
  args.req.shape = {4};
  args.req.device = kGpu;
  args.req.device.index = 4095;  // no machine has this GPU
  args.input = x;
  std::string what;
  try {
    rt.enqueue(args);
  } catch (const RingError& e) {
    CHECK(e.kind() == ErrorKind::BadArgument);
    what = e.what();
  }
  // Why follows: here, no CUDA driver (or, on a GPU machine, no such GPU).
  const std::string head = "allreduce of tensor 't': no backend for device cuda:4095: ";
  CHECK_EQ(what.substr(0, head.size()), head);
  CHECK(what.size() > head.size());
  args.req.device = Device{};  // the same name is free again: nothing was queued
  int64_t h = rt.enqueue(args);
  CHECK(rt.wait(h, 30.0));
  CHECK_EQ(rt.release(h).shape[0], (int64_t)4);
  rt.shutdown();
}

TEST(device_names_parse_and_print) {
  CHECK(parse_device("cpu") == Device{});
  CHECK(parse_device("cuda") == kGpu);
  CHECK(parse_device("cuda:7") == (Device{DeviceType::CUDA, 7}));
  CHECK_EQ(device_name(Device{DeviceType::CUDA, 7}), std::string("cuda:7"));
  for (const char* bad : {"", "gpu", "cpu:1", "cuda:", "cuda:-1", "cuda:1x", "cuda:99999999"})
    CHECK_THROWS_KIND(parse_device(bad), ErrorKind::BadArgument);
}

TEST(shm_segment_names_are_the_ones_a_rank_creates) {
  const std::string job = "names-" + std::to_string(::getpid());
  const std::vector<std::string> names = shm_segment_names(job, 1);
  CHECK(names == (std::vector<std::string>{"/ring." + job + ".1", "/ring." + job + "-c.1"}));
  auto listed = [&] {  // this job's names in /dev/shm
    std::vector<std::string> found;
    const std::string prefix = "ring." + job;
    DIR* dir = ::opendir("/dev/shm");
    if (!dir) return found;
    while (dirent* d = ::readdir(dir))
      if (std::strncmp(d->d_name, prefix.c_str(), prefix.size()) == 0) found.push_back(std::string("/") + d->d_name);
    ::closedir(dir);
    std::sort(found.begin(), found.end());
    return found;
  };
  {
    RuntimeOptions o;
    o.rank = 1;
    o.size = 2;
    o.secret = "0123456789abcdef0123456789abcdef";
    o.job_id = job;
    Runtime rt(o);
    rt.local_endpoint();  // creates the segments
    std::vector<std::string> expected = names;
    std::sort(expected.begin(), expected.end());
    CHECK(listed() == expected);
  }
  CHECK(listed().empty());  // never connected: removed when the runtime goes
  CHECK_THROWS_KIND(shm_segment_names("bad/id", 0), ErrorKind::BadArgument);
  CHECK_THROWS_KIND(shm_segment_names(job, -1), ErrorKind::BadArgument);
}
