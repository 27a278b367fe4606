// The negotiation logic without any transport: readiness, validation,
// fusion, the response cache and shutdown.
#include <string>

#include "collectives/slices.h"
#include "engine/coordinator.h"
#include "tests/harness.h"

using namespace ring;

namespace {

Request allreduce(const std::string& name, std::vector<int64_t> shape, DataType dt = DataType::Float32) {
  Request q;
  q.name = name;
  q.op = OpType::Allreduce;
  q.dtype = dt;
  q.shape = std::move(shape);
  return q;
}

}  // namespace

TEST(coordinator_waits_for_every_rank) {
  ResponseCache cache(16, 3);
  Coordinator c(3, &cache, 1 << 20);
  c.add_request(0, allreduce("a", {4}));
  c.add_request(2, allreduce("a", {4}));
  CHECK(!c.has_work());
  c.add_request(1, allreduce("a", {4}));
  CHECK(c.has_work());
  ResponseList list = c.take();
  CHECK_EQ(list.responses.size(), (size_t)1);
  CHECK_EQ(list.cache_puts.size(), (size_t)1);
  CHECK(list.responses[0].kind == ResponseKind::Execute);
}

TEST(coordinator_mismatch_names_tensor_field_and_ranks) {
  ResponseCache cache(16, 3);
  Coordinator c(3, &cache, 1 << 20);
  c.add_request(0, allreduce("w", {4}));
  c.add_request(1, allreduce("w", {5}));
  c.add_request(2, allreduce("w", {4}));
  ResponseList list = c.take();
  CHECK_EQ(list.responses.size(), (size_t)1);
  CHECK(list.responses[0].kind == ResponseKind::Error);
  CHECK_EQ(list.responses[0].error, std::string("Mismatched shape for tensor 'w': ranks 0, 2: [4]; rank 1: [5]"));
  CHECK(list.cache_puts.empty());
}

TEST(coordinator_fuses_same_kind_up_to_threshold) {
  ResponseCache cache(16, 2);
  Coordinator c(2, &cache, 40);  // bytes: room for two 4-float tensors
  for (int r = 0; r < 2; ++r) {
    c.add_request(r, allreduce("a", {4}));
    c.add_request(r, allreduce("b", {4}));
    c.add_request(r, allreduce("h", {4}, DataType::Float64));
    c.add_request(r, allreduce("c", {4}));
  }
  ResponseList list = c.take();
  CHECK_EQ(list.responses.size(), (size_t)3);
  CHECK_EQ(list.responses[0].names.size(), (size_t)2);  // a, b
  CHECK_EQ(list.responses[1].names[0], std::string("h"));
  CHECK_EQ(list.responses[2].names[0], std::string("c"));
}

TEST(coordinator_runs_large_allreduces_alone) {
  ResponseCache cache(16, 2);
  Coordinator c(2, &cache, 1 << 20);
  c.set_alone_bytes(64);  // 16 floats and more run alone
  c.add_request(0, allreduce("a", {4}));
  c.add_request(0, allreduce("big", {16}));
  c.add_request(0, allreduce("b", {4}));
  c.add_request(0, allreduce("later", {4}));
  c.add_request(1, allreduce("a", {4}));
  CHECK(c.worth_waiting());  // small ones may still gather a batch
  c.add_request(1, allreduce("big", {16}));
  CHECK(!c.worth_waiting());  // a large one is ready: no reason to wait
  c.add_request(1, allreduce("b", {4}));
  ResponseList list = c.take();
  CHECK_EQ(list.responses.size(), (size_t)2);
  CHECK_EQ(list.responses[0].names.size(), (size_t)2);  // a and b fused around it
  CHECK_EQ(list.responses[0].names[1], std::string("b"));
  CHECK_EQ(list.responses[1].names.size(), (size_t)1);
  CHECK_EQ(list.responses[1].names[0], std::string("big"));
  CHECK(c.worth_waiting());  // "later" is still missing on rank 1
}

TEST(coordinator_cache_bits_resolve_to_signatures) {
  ResponseCache cache(16, 2);
  Coordinator c(2, &cache, 1 << 20);
  c.add_request(0, allreduce("a", {4}));
  RequestList first;
  first.requests.push_back(allreduce("a", {4}));
  c.add(1, RequestList::decode(first.encode()));
  c.take();
  CHECK_EQ(cache.id_of("a"), (int64_t)0);
  RequestList again;
  again.cache_bits = {1};
  c.add_request(0, allreduce("a", {4}));
  c.add(1, RequestList::decode(again.encode()));
  ResponseList list = c.take();
  CHECK_EQ(list.responses.size(), (size_t)1);
  CHECK(list.responses[0].kind == ResponseKind::Execute);
  RequestList bogus;
  bogus.cache_bits = {2};
  CHECK_THROWS_KIND(c.add(1, bogus), ErrorKind::Internal);
}

TEST(coordinator_shutdown_fails_unfinished) {
  ResponseCache cache(16, 2);
  Coordinator c(2, &cache, 1 << 20);
  c.add_request(1, allreduce("lonely", {1}));
  c.request_shutdown(0);
  ResponseList list = c.take();
  CHECK(list.shutdown);
  CHECK_EQ(list.responses.size(), (size_t)1);
  CHECK(list.responses[0].error.find("never submitted by rank(s) 0") != std::string::npos);
}

TEST(response_list_round_trip_with_cache_ids) {
  ResponseCache cache(16, 2);
  cache.put("x", 0);
  ResponseList list;
  list.cache_puts.push_back({"y", 1});
  Response r;
  r.names = {"x", "y", "z"};
  r.sizes = {1, 2};
  list.responses.push_back(r);
  list.acked = 7;
  auto bytes = list.encode([&](const std::string& n) { return n == "y" ? 1 : cache.id_of(n); });
  auto back = ResponseList::decode(bytes, [&](const ResponseList& l, uint32_t id) {
    for (auto& p : l.cache_puts)
      if (p.id == id) return p.name;
    return cache.name_of(id);
  });
  CHECK_EQ(back.responses[0].names[1], std::string("y"));
  CHECK_EQ(back.responses[0].names[2], std::string("z"));
  CHECK_EQ(back.acked, (int64_t)7);
  // One encoding serves every worker: only `acked` is rewritten.
  auto names = [&](const ResponseList& l, uint32_t id) { return id == 1 ? l.cache_puts[0].name : cache.name_of(id); };
  ResponseList::set_encoded_acked(bytes, 9);
  auto other = ResponseList::decode(bytes, names);
  CHECK_EQ(other.acked, (int64_t)9);
  CHECK_EQ(other.responses[0].names[0], std::string("x"));
  CHECK_EQ(other.responses[0].sizes[1], (int64_t)2);
  bytes.resize(bytes.size() - 3);
  CHECK_THROWS_KIND(RequestList::decode(bytes), ErrorKind::Internal);
}

TEST(slices_cover_the_tensor) {
  for (size_t count : {0, 1, 7, 1001}) {
    for (int n : {1, 2, 3, 5, 8}) {
      size_t total = 0;
      for (int c = 0; c < n; ++c) {
        CHECK_EQ(slice_offset(count, n, c), total);
        total += slice_count(count, n, c);
      }
      CHECK_EQ(total, count);
    }
  }
}

TEST(coordinator_join_completes_allreduce_without_the_joined_rank) {
  ResponseCache cache(16, 3);
  Coordinator c(3, &cache, 1 << 20);
  Request join;
  join.name = "join";
  join.op = OpType::Join;
  c.add_request(0, allreduce("g", {5}));
  c.add_request(1, join);  // rank 1 ran out of data
  c.add_request(2, allreduce("g", {5}));
  ResponseList list = c.take();
  CHECK_EQ(list.responses.size(), (size_t)1);
  CHECK(list.responses[0].kind == ResponseKind::Execute);
  CHECK_EQ(list.responses[0].sizes[0], (int64_t)5);  // what rank 1 must add zeros of
  CHECK(list.cache_puts.empty());                      // rank 1 has no signature to cache
  Request b = allreduce("b", {2});
  b.op = OpType::Broadcast;
  c.add_request(0, b);
  c.add_request(2, b);
  list = c.take();
  CHECK(list.responses[0].kind == ResponseKind::Error);
  CHECK(list.responses[0].error.find("have joined") != std::string::npos);
  c.add_request(2, join);
  c.add_request(0, join);
  list = c.take();
  CHECK_EQ(list.responses.size(), (size_t)1);
  CHECK(list.responses[0].op == OpType::Join);
  CHECK_EQ(list.responses[0].sizes[0], (int64_t)0);  // rank 0 joined last
}

TEST(coordinator_reports_stalled_tensors_with_missing_ranks) {
  ResponseCache cache(16, 3);
  Coordinator c(3, &cache, 1 << 20);
  c.add_request(0, allreduce("late", {4}));
  c.add_request(2, allreduce("late", {4}));
  c.add_request(1, allreduce("fresh", {4}));
  auto now = Coordinator::Clock::now();
  CHECK(c.stalled(now, 5.0).empty());
  auto stalls = c.stalled(now + std::chrono::seconds(10), 5.0);
  CHECK_EQ(stalls.size(), (size_t)2);
  CHECK_EQ(stalls[0].name, std::string("late"));
  CHECK_EQ(stalls[0].missing.size(), (size_t)1);
  CHECK_EQ(stalls[0].missing[0], 1);
  CHECK_EQ(stalls[1].missing.size(), (size_t)2);  // 'fresh': ranks 0 and 2
}

TEST(coordinator_fail_stalled_ends_job_with_timeout_errors) {
  ResponseCache cache(16, 2);
  Coordinator c(2, &cache, 1 << 20);
  c.add_request(0, allreduce("x", {4}));
  CHECK(!c.has_work());
  c.fail_stalled("stalled: 'x' (not submitted by rank 1)");
  CHECK(c.has_work());
  ResponseList list = c.take();
  CHECK(list.shutdown);
  CHECK_EQ(list.shutdown_reason, std::string("stalled: 'x' (not submitted by rank 1)"));
  CHECK_EQ(list.responses.size(), (size_t)1);
  CHECK(list.responses[0].kind == ResponseKind::Error);
  CHECK(list.responses[0].error_kind == ErrorKind::Timeout);
}
