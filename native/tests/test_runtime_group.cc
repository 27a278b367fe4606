// A group of operations queued at once (Runtime::enqueue_group) and waited
// for and released at once (Runtime::wait_all, HandleTable::release_all):
// all or nothing on a bad member, mixed dtypes, the first error after every
// handle is released.
#include <cstdint>
#include <string>
#include <vector>

#include "engine/handle_table.h"
#include "engine/runtime.h"
#include "tests/harness.h"

using namespace ring;

namespace {

// An allreduce (sum) of `n` elements of `dtype` from `in` into `out`.
EnqueueArgs allreduce(const std::string& name, DataType dtype, int64_t n, const void* in, void* out) {
  EnqueueArgs a;
  a.req.name = name;
  a.req.dtype = dtype;
  a.req.shape = {n};
  a.input = in;
  a.output = out;
  a.output_bytes = static_cast<size_t>(n) * dtype_size(dtype);
  return a;
}

// The error message `stmt` throws as a RingError of `kind`; "" otherwise.
template <class F>
std::string error_of(F stmt, ErrorKind kind) {
  try {
    stmt();
  } catch (const RingError& e) {
    if (e.kind() == kind) return e.what();
  }
  return "";
}

}  // namespace

TEST(runtime_group_of_mixed_dtypes_is_queued_and_released_together) {
  RuntimeOptions o;
  o.job_id = "group-test";
  Runtime rt(o);
  rt.connect({rt.local_endpoint()});
  rt.start();
  float f[3] = {1.5f, 2.5f, -3.0f}, fo[3] = {};
  int64_t i[2] = {7, -9}, io[2] = {};
  std::vector<EnqueueArgs> group;
  group.push_back(allreduce("g.0", DataType::Float32, 3, f, fo));
  group.push_back(allreduce("g.1", DataType::Int64, 2, i, io));
  std::vector<int64_t> h = rt.enqueue_group(group);
  CHECK_EQ(h.size(), (size_t)2);
  CHECK(rt.wait_all(h, 30.0));
  std::vector<OpResult> res = rt.release_all(h);
  CHECK_EQ(res.size(), (size_t)2);
  CHECK_EQ(res[1].shape[0], (int64_t)2);
  CHECK(fo[0] == 1.5f && fo[2] == -3.0f && io[0] == 7 && io[1] == -9);  // one rank: the sum is the input
  CHECK_THROWS_KIND(rt.poll(h[0]), ErrorKind::BadArgument);  // forgotten
  CHECK(rt.enqueue_group({}).empty());
  rt.shutdown();
}

TEST(runtime_group_with_a_bad_member_queues_nothing) {
  RuntimeOptions o;
  o.job_id = "group-bad-test";
  Runtime rt(o);
  rt.connect({rt.local_endpoint()});
  rt.start();
  float f[4] = {1, 2, 3, 4}, fo[4] = {}, short_out[2] = {};
  std::vector<EnqueueArgs> group;
  group.push_back(allreduce("b.0", DataType::Float32, 4, f, fo));
  group.push_back(allreduce("b.1", DataType::Float32, 4, f, short_out));
  group.back().output_bytes = sizeof(short_out);
  std::string what = error_of([&] { rt.enqueue_group(group); }, ErrorKind::BadArgument);
  CHECK(what.find("tensor 'b.1'") != std::string::npos);
  group.back() = allreduce("b.0", DataType::Float32, 4, f, fo);  // a name twice
  what = error_of([&] { rt.enqueue_group(group); }, ErrorKind::BadArgument);
  CHECK(what.find("'b.0' appears twice in one group") != std::string::npos);
  // Nothing was queued and no name was taken: the same names go through now.
  float fo2[4] = {};
  group.back() = allreduce("b.1", DataType::Float32, 4, f, fo2);
  std::vector<int64_t> h = rt.enqueue_group(group);
  CHECK(rt.wait_all(h, 30.0));
  rt.release_all(h);
  CHECK(fo[3] == 4.0f && fo2[0] == 1.0f);
  rt.shutdown();
}

TEST(handle_table_release_all_raises_the_first_error_after_releasing_every_handle) {
  HandleTable t;
  std::vector<int64_t> h = t.create_all({"a", "b", "c"});
  CHECK_THROWS_KIND(t.create_all({"d", "b"}), ErrorKind::BadArgument);  // "b" is in flight
  t.create("d");  // ... and "d" was not taken
  t.complete(h[0], OpResult{});
  CHECK_THROWS_KIND(t.release_all(h), ErrorKind::BadArgument);  // h[1], h[2] unfinished: none released
  CHECK(t.poll(h[0]));
  t.fail(h[1], ErrorKind::Mismatch, "first");
  t.fail(h[2], ErrorKind::Timeout, "second");
  CHECK_THROWS_KIND(t.release_all({h[0], h[0]}), ErrorKind::BadArgument);  // twice: none released
  CHECK_EQ(error_of([&] { t.release_all(h); }, ErrorKind::Mismatch), std::string("first"));
  for (int64_t x : h) CHECK_THROWS_KIND(t.poll(x), ErrorKind::BadArgument);  // every one released
}

TEST(handle_table_reuses_slots_under_new_handles) {
  HandleTable t;
  const int64_t first = t.create("a");
  t.complete(first, OpResult{});
  t.release(first);
  const int64_t second = t.create("a");  // the same slot, a new generation
  CHECK(second != first && second > 0 && first > 0);
  CHECK_THROWS_KIND(t.poll(first), ErrorKind::BadArgument);  // released: unknown, not the new one
  CHECK(!t.poll(second));
  t.complete(first, OpResult{});  // an old handle is left alone
  CHECK(!t.poll(second));
  t.discard(second);
  CHECK_THROWS_KIND(t.poll(second), ErrorKind::BadArgument);
  CHECK_THROWS_KIND(t.poll(0), ErrorKind::BadArgument);
  CHECK_THROWS_KIND(t.poll(-5), ErrorKind::BadArgument);
}
