// Completion callbacks (HandleTable::on_finish) and the C interface framework
// kernels use (frameworks/engine_api.h) over a published runtime of one rank:
// done is called once per operation, after the handle is released, with the
// result or the error; nothing reaches a withdrawn runtime.
#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "engine/handle_table.h"
#include "engine/published.h"
#include "engine/runtime.h"
#include "frameworks/engine_calls.h"
#include "tests/harness.h"

using namespace ring;

namespace {

struct Seen {
  std::atomic<int> calls{0};
  int32_t kind = 99;
  std::string message;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;
};

void record(void* ctx, int32_t kind, const char* message, const RingResult* r) {
  auto* s = static_cast<Seen*>(ctx);
  s->kind = kind;
  s->message = message ? message : "";
  if (r) {
    s->shape.assign(r->shape, r->shape + r->ndim);
    const auto* p = static_cast<const uint8_t*>(r->data);
    if (p) s->data.assign(p, p + r->nbytes);
  }
  s->calls.fetch_add(1);
}

bool wait_for(const Seen& s, int calls) {
  for (int i = 0; i < 3000 && s.calls.load() < calls; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return s.calls.load() == calls;
}

RingOpArgs op_args(const char* name, int32_t op, const float* in, float* out, const int64_t* shape) {
  RingOpArgs a;
  std::memset(&a, 0, sizeof(a));
  a.name = name;
  a.op = op;
  a.dtype = static_cast<int32_t>(DataType::Float32);
  a.prescale = a.postscale = 1.0;
  a.shape = shape;
  a.ndim = 1;
  a.input = in;
  a.input_bytes = static_cast<size_t>(shape[0]) * sizeof(float);
  a.output = out;
  a.output_bytes = out ? a.input_bytes : 0;
  return a;
}

}  // namespace

TEST(handle_callback_runs_once_now_or_when_finished) {
  HandleTable t;
  int ran = 0;
  int64_t h = t.create("a");
  t.on_finish(h, [&] { ++ran; });
  CHECK_EQ(ran, 0);
  CHECK_THROWS_KIND(t.on_finish(h, [] {}), ErrorKind::BadArgument);  // one callback per handle
  t.complete(h, OpResult{});
  CHECK_EQ(ran, 1);
  t.on_finish(t.create("b"), [] {});
  int64_t done = t.create("c");
  t.fail(done, ErrorKind::Timeout, "late");
  t.on_finish(done, [&] { ran += 10; });  // already finished: at once
  CHECK_EQ(ran, 11);
  // fail_all without callbacks leaves them to run_callbacks; the callback may release its handle
  int64_t d = t.create("d");
  t.on_finish(d, [&] {
    CHECK_THROWS_KIND(t.release(d), ErrorKind::PeerFailure);
    ran += 100;
  });
  t.fail_all(ErrorKind::PeerFailure, "lost", false);
  CHECK_EQ(ran, 11);
  t.run_callbacks();
  CHECK_EQ(ran, 111);
}

TEST(engine_api_queues_and_completes_through_done) {
  const RingEngineApi* api = engine_api();
  CHECK_EQ(api->version, (uint32_t)RING_ENGINE_API_VERSION);
  char error[256];
  int64_t value = 0;
  CHECK_EQ(api->query(RING_QUERY_SIZE, 0, &value, error, sizeof(error)), (int32_t)RING_ERROR_SHUTDOWN);
  RuntimeOptions o;
  o.job_id = "engine-api-test";
  {
    Runtime rt(o);
    rt.connect({rt.local_endpoint()});
    rt.start();
    publish_runtime(&rt);
    CHECK_EQ(api->query(RING_QUERY_SIZE, 0, &value, error, sizeof(error)), (int32_t)RING_OK);
    CHECK_EQ(value, (int64_t)1);
    CHECK_EQ(api->query(RING_QUERY_SET_SIZE, 7, &value, error, sizeof(error)),
             (int32_t)ErrorKind::BadArgument);  // no set 7
    const float in[3] = {1.f, 2.f, 3.f};
    float out[3] = {};
    const int64_t shape[1] = {3};
    Seen reduced, gathered;
    RingOpArgs ops[2] = {op_args("r", static_cast<int32_t>(OpType::Allreduce), in, out, shape),
                         op_args("g", static_cast<int32_t>(OpType::Allgather), in, nullptr, shape)};
    void* ctxs[2] = {&reduced, &gathered};
    CHECK_EQ(api->enqueue(ops, 2, &record, ctxs, error, sizeof(error)), (int32_t)RING_OK);
    CHECK(wait_for(reduced, 1) && wait_for(gathered, 1));
    CHECK_EQ(reduced.kind, (int32_t)RING_OK);
    CHECK(out[0] == 1.f && out[2] == 3.f);
    CHECK_EQ(gathered.shape.size(), (size_t)1);
    CHECK_EQ(gathered.data.size(), sizeof(in));
    // a refused group calls nothing and says why
    Seen refused;
    RingOpArgs bad = op_args("bad", static_cast<int32_t>(OpType::Allreduce), in, out, shape);
    bad.input_bytes = 5;
    void* ctx = &refused;
    CHECK_EQ(api->enqueue(&bad, 1, &record, &ctx, error, sizeof(error)), (int32_t)ErrorKind::BadArgument);
    CHECK(std::string(error).find("'bad'") != std::string::npos);
    CHECK_EQ(refused.calls.load(), 0);
    rt.shutdown();
  }  // destroyed: withdrawn
  Seen late;
  const float in[1] = {1.f};
  const int64_t shape[1] = {1};
  RingOpArgs a = op_args("late", static_cast<int32_t>(OpType::Allreduce), in, nullptr, shape);
  void* ctx = &late;
  CHECK_EQ(api->enqueue(&a, 1, &record, &ctx, error, sizeof(error)), (int32_t)RING_ERROR_SHUTDOWN);
}

TEST(handle_table_waits_until_no_name_has_a_prefix) {
  HandleTable t;
  int64_t a = t.create("process_set3/x");
  t.create("other");
  CHECK(!t.wait_no_name_prefix("process_set3/", 0.01));
  std::thread finisher([&] { t.complete(a, OpResult{}); });
  CHECK(t.wait_no_name_prefix("process_set3/", 10.0));
  finisher.join();
  CHECK(t.wait_no_name_prefix("process_set4/", 0.0));
}
