// Process sets in the negotiation (engine/process_sets.h): readiness over a
// set's members, per-set fusion, what a response of a set carries, and the
// errors for an unknown set or a rank outside it.
#include <string>

#include "engine/coordinator.h"
#include "engine/process_sets.h"
#include "tests/harness.h"

using namespace ring;

namespace {

Request in_set(const std::string& name, int32_t set, OpType op = OpType::Allreduce, std::vector<int64_t> shape = {4}) {
  Request q;
  q.name = qualified_name(name, set);
  q.op = op;
  q.shape = std::move(shape);
  q.process_set = set;
  return q;
}

}  // namespace

TEST(process_set_table_checks_ranks_and_ids) {
  ProcessSetTable t(4);
  CHECK(t.find(0) != nullptr);
  CHECK_EQ(t.find(0)->size(), 4);
  t.add(1, {2, 1}, nullptr);
  CHECK(t.find(1)->ranks == std::vector<int>({1, 2}));
  CHECK_EQ(t.find(1)->index_of(2), 1);
  CHECK_EQ(t.find(1)->index_of(0), -1);
  CHECK_THROWS_KIND(t.add(1, {0}, nullptr), ErrorKind::BadArgument);        // id in use
  CHECK_THROWS_KIND(t.add(2, {0, 4}, nullptr), ErrorKind::BadArgument);     // out of range
  CHECK_THROWS_KIND(t.add(2, {1, 1}, nullptr), ErrorKind::BadArgument);     // twice
  CHECK_THROWS_KIND(t.add(2, {}, nullptr), ErrorKind::BadArgument);         // empty
  CHECK_THROWS_KIND(t.add(0, {0}, nullptr), ErrorKind::BadArgument);        // the global set's id
  CHECK_THROWS_KIND(t.remove(0), ErrorKind::BadArgument);
  CHECK(t.remove(1));
  CHECK(!t.remove(1));
  CHECK(t.find(1) == nullptr);
  CHECK_EQ(qualified_name("g", 0), std::string("g"));
  CHECK(qualified_name("g", 3) != qualified_name("g", 4));
}

TEST(coordinator_counts_a_set_ready_over_its_members) {
  ProcessSetTable sets(4);
  sets.add(1, {1, 2}, nullptr);
  sets.add(2, {0, 1, 2}, nullptr);
  ResponseCache cache(16, 4);
  Coordinator c(4, &cache, 1 << 20);
  c.set_process_sets(&sets);
  c.add_request(1, in_set("a", 1));
  CHECK(!c.has_work());
  c.add_request(2, in_set("a", 1));
  // The same name in an overlapping set is another tensor.
  c.add_request(1, in_set("a", 2));
  c.add_request(0, in_set("g", 2, OpType::Allgather, {3}));
  c.add_request(1, in_set("g", 2, OpType::Allgather, {1}));
  c.add_request(2, in_set("g", 2, OpType::Allgather, {2}));
  ResponseList list = c.take();
  CHECK_EQ(list.responses.size(), (size_t)2);
  CHECK(list.responses[0].kind == ResponseKind::Execute);
  CHECK_EQ(list.responses[0].process_set, 1);
  CHECK_EQ(list.responses[1].process_set, 2);
  CHECK(list.responses[1].sizes == std::vector<int64_t>({3, 1, 2}));  // one first dimension per member
  CHECK_EQ(list.cache_puts.size(), (size_t)2);
  auto stalls = c.stalled(Coordinator::Clock::now() + std::chrono::seconds(10), 5.0);
  CHECK_EQ(stalls.size(), (size_t)1);
  CHECK(stalls[0].missing == std::vector<int>({0, 2}));  // members only
}

TEST(coordinator_fuses_only_within_a_set) {
  ProcessSetTable sets(2);
  sets.add(1, {0, 1}, nullptr);
  ResponseCache cache(16, 2);
  Coordinator c(2, &cache, 1 << 20);
  c.set_process_sets(&sets);
  for (int r = 0; r < 2; ++r) {
    c.add_request(r, in_set("x", 0));
    c.add_request(r, in_set("y", 1));
    c.add_request(r, in_set("z", 1));
  }
  ResponseList list = c.take();
  CHECK_EQ(list.responses.size(), (size_t)2);
  CHECK_EQ(list.responses[0].names.size(), (size_t)1);
  CHECK_EQ(list.responses[1].names.size(), (size_t)2);
  CHECK_EQ(list.responses[1].process_set, 1);
}

TEST(coordinator_fails_unknown_sets_and_outsiders_at_once) {
  ProcessSetTable sets(3);
  sets.add(1, {0, 1}, nullptr);
  ResponseCache cache(16, 3);
  Coordinator c(3, &cache, 1 << 20);
  c.set_process_sets(&sets);
  c.add_request(1, in_set("u", 7));
  ResponseList list = c.take();
  CHECK_EQ(list.responses.size(), (size_t)1);
  CHECK(list.responses[0].kind == ResponseKind::Error);
  CHECK(list.responses[0].error.find("process set 7 is not registered") != std::string::npos);
  c.add_request(0, in_set("o", 1));
  c.add_request(2, in_set("o", 1));  // rank 2 is not in set 1
  list = c.take();
  CHECK_EQ(list.responses.size(), (size_t)1);
  CHECK(list.responses[0].kind == ResponseKind::Error);
  CHECK(list.responses[0].error.find("not a member of process set 1") != std::string::npos);
}

TEST(response_list_carries_the_process_set) {
  ResponseList list;
  Response r;
  r.names = {"a"};
  r.process_set = 5;
  list.responses.push_back(r);
  auto no_id = [](const std::string&) -> int64_t { return -1; };
  auto bytes = list.encode(no_id);
  ResponseList back = ResponseList::decode(bytes, [](const ResponseList&, uint32_t) { return std::string(); });
  CHECK_EQ(back.responses[0].process_set, 5);
}
