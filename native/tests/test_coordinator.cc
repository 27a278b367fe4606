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

namespace {

// Caches `name` (a 4-float allreduce) on every rank of `c` through the table.
void cache_through_table(Coordinator& c, int n, const std::string& name) {
  for (int r = 0; r < n; ++r) c.add_request(r, allreduce(name, {4}));
  c.take();
}

RequestList bits(uint32_t id) {
  RequestList l;
  l.cache_bits.assign(id / 8 + 1, 0);
  l.cache_bits[id / 8] = static_cast<uint8_t>(1u << (id % 8));
  return l;
}

}  // namespace

TEST(coordinator_counts_agreed_cached_bits_and_validates_changes) {
  ResponseCache cache(16, 2);
  Coordinator c(2, &cache, 1 << 20);
  cache_through_table(c, 2, "a");
  // Both ranks as before: counted, executed from the signatures.
  c.add_local(0, allreduce("a", {4}));
  CHECK(!c.has_work());
  CHECK(c.worth_waiting());
  c.add(1, bits(0));
  ResponseList list = c.take();
  CHECK_EQ(list.responses.size(), (size_t)1);
  CHECK(list.responses[0].kind == ResponseKind::Execute);
  CHECK_EQ(list.responses[0].names[0], std::string("a"));
  CHECK_EQ(list.responses[0].sizes[0], (int64_t)4);
  // Rank 1 changes the shape after rank 0's bit was counted: the counted
  // bit joins rank 1's request in the table, and validation catches it.
  c.add_local(0, allreduce("a", {4}));
  RequestList changed;
  changed.requests.push_back(allreduce("a", {5}));
  c.add(1, changed);
  list = c.take();
  CHECK(list.responses[0].kind == ResponseKind::Error);
  CHECK(list.responses[0].error.find("Mismatched shape for tensor 'a'") == 0);
  // Both now send bits for their own (different) signatures: still not
  // agreed, so the table validates again instead of executing.
  c.add_local(0, allreduce("a", {4}));
  c.add(1, bits(0));
  list = c.take();
  CHECK(list.responses[0].kind == ResponseKind::Error);
  // Rank 0 follows: the table validates, agreement is restored, and bits
  // are counted again.
  c.add_local(0, allreduce("a", {5}));
  c.add(1, bits(0));
  list = c.take();
  CHECK(list.responses[0].kind == ResponseKind::Execute);
  CHECK_EQ(list.responses[0].sizes[0], (int64_t)5);
  c.add(1, bits(0));
  c.add_local(0, allreduce("a", {5}));
  list = c.take();
  CHECK(list.responses[0].kind == ResponseKind::Execute);
  CHECK_THROWS_KIND(c.add(1, bits(3)), ErrorKind::Internal);  // never cached
}

TEST(coordinator_counted_bits_stall_join_and_shut_down_like_table_entries) {
  ResponseCache cache(16, 3);
  Coordinator c(3, &cache, 1 << 20);
  cache_through_table(c, 3, "g");
  c.add_local(0, allreduce("g", {4}));
  c.add(2, bits(0));
  auto now = Coordinator::Clock::now();
  auto stalls = c.stalled(now + std::chrono::seconds(10), 5.0);
  CHECK_EQ(stalls.size(), (size_t)1);
  CHECK_EQ(stalls[0].name, std::string("g"));
  CHECK_EQ(stalls[0].missing.size(), (size_t)1);
  CHECK_EQ(stalls[0].missing[0], 1);
  Request join;
  join.name = "join";
  join.op = OpType::Join;
  c.add_request(1, join);  // only rank 1 was missing: the join completes it
  ResponseList list = c.take();
  CHECK_EQ(list.responses.size(), (size_t)1);
  CHECK(list.responses[0].kind == ResponseKind::Execute);
  CHECK_EQ(list.responses[0].names[0], std::string("g"));
  c.add_request(0, join);
  c.add_request(2, join);
  c.take();
  for (int r = 0; r < 3; ++r) c.add_local(r, allreduce("g", {4}));  // agreed again (every rank took part)
  CHECK_EQ(c.take().responses.size(), (size_t)1);
  c.add(2, bits(0));
  c.request_shutdown(2);
  list = c.take();
  CHECK(list.shutdown);
  CHECK_EQ(list.responses.size(), (size_t)1);
  CHECK(list.responses[0].error.find("tensor 'g' was never submitted by rank(s) 0, 1") != std::string::npos);
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
