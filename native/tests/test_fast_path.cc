// The fast path for agreed cached allreduces (engine/fast_path.h): the round
// message's wire format, the verdicts, and whole rounds on ranks as threads.
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "engine/fast_path.h"
#include "tests/fixture.h"
#include "tests/harness.h"

using namespace ring;

namespace {

FastMessage message(uint64_t round, bool no_fast, const std::vector<std::pair<uint32_t, int>>& items) {
  FastWriter w(round, no_fast);
  for (const auto& [id, value] : items) {
    if (value < 0) {
      w.slow(id);
      continue;
    }
    uint8_t* d = w.hit(id, 4);
    std::memcpy(d, &value, 4);
  }
  return FastMessage::decode(w.finish());
}

Request small(const std::string& name, int64_t n, ReduceOp op = ReduceOp::Sum) {
  Request q;
  q.name = name;
  q.dtype = DataType::Float32;
  q.reduce_op = op;
  q.shape = {n};
  return q;
}

// One rank's engine parts around a FastPath, for a whole round on threads.
struct Rank {
  explicit Rank(Mesh& m, int tensors) : cache(64, m.size()), fast(&m, &cache, &handles, &pending, options()) {
    for (int t = 0; t < tensors; ++t) cache.put("t" + std::to_string(t), t);
  }
  static FastPathOptions options() {
    FastPathOptions o;
    o.enabled = true;
    o.patience_s = 0.2;
    o.answer_timeout_s = 10;
    return o;
  }
  // Submits `q` with `input`; true when the fast path took it.
  int64_t submit(const Request& q, const float* input, float* output, bool* taken) {
    Entry e;
    e.req = q;
    e.input = input;
    e.output = output;
    e.handle = handles.create(q.name);
    std::vector<Entry> batch{e};
    fast.begin_batch(batch);
    *taken = fast.admit(q, FastPath::Clock::now());
    pending[q.name] = e;
    return e.handle;
  }
  // As if the negotiation had run `q` on every rank.
  void agree(const Request& q) {
    Entry e;
    e.req = q;
    pending[q.name] = e;
    Response r;
    r.names = {q.name};
    fast.note_response(r);
    pending.erase(q.name);
  }
  // Steps until `handle` finished or something went back.
  std::vector<Request> drive(int64_t handle) {
    std::vector<Request> back;
    const auto until = FastPath::Clock::now() + std::chrono::seconds(5);
    while (!handles.poll(handle) && back.empty() && FastPath::Clock::now() < until) {
      fast.poll();
      fast.step(FastPath::Clock::now(), back);
    }
    return back;
  }
  ResponseCache cache;
  HandleTable handles;
  FastPath::PendingMap pending;
  FastPath fast;
};

// Reads rank 0's links for the fast path as the runtime would.
void read_rank0_links(Mesh& m, Rank& me) {
  for (int p = 0; p < m.size(); ++p) {
    if (p == m.rank() || (m.rank() != 0 && p != 0)) continue;
    while (m.readable(p)) me.fast.receive(p, m.recv_msg(p, 1 << 20));
  }
}

}  // namespace

TEST(fast_message_round_trips_hits_and_slows) {
  FastMessage m = message(7, true, {{1, 42}, {3, -1}, {9, 5}});
  CHECK_EQ(m.round, (uint64_t)7);
  CHECK(m.no_fast);
  CHECK_EQ(m.items.size(), (size_t)3);
  CHECK(m.items[0].hit && m.items[0].bytes == 4);
  int v = 0;
  std::memcpy(&v, m.items[0].data, 4);
  CHECK_EQ(v, 42);
  CHECK(!m.items[1].hit && m.items[1].id == 3u);
  CHECK(FastMessage::is_fast(m.bytes));
  std::vector<uint8_t> bad = m.bytes;
  bad.pop_back();
  bool threw = false;
  try {
    FastMessage::decode(bad);
  } catch (const RingError&) {
    threw = true;
  }
  CHECK(threw);
}

TEST(fast_verdicts_run_wait_and_back) {
  FastMessage a = message(0, false, {{1, 1}, {2, 1}, {3, 1}});
  FastMessage b = message(0, false, {{1, 2}, {3, -1}, {4, 2}});
  FastDecision d = decide({&a, &b});
  CHECK(!d.no_fast);
  CHECK_EQ(d.verdicts.size(), (size_t)4);
  CHECK(d.verdicts[0].second == FastVerdict::Run);   // both hit 1
  CHECK(d.verdicts[1].second == FastVerdict::Wait);  // only a has 2
  CHECK(d.verdicts[2].second == FastVerdict::Back);  // b sent 3 to rank 0
  CHECK(d.verdicts[3].second == FastVerdict::Wait);
  FastMessage c = message(0, true, {});
  FastDecision e = decide({&a, &c});
  CHECK(e.no_fast);
  CHECK(e.verdicts[0].second == FastVerdict::Back);
}

TEST(fast_path_reduces_in_one_round_on_every_rank) {
  for (int n : {2, 3, 5}) {
    ring_test::run_ranks(n, [&](Mesh& m) {
      Rank me(m, 2);
      const Request q = small("t1", 3, ReduceOp::Average);
      me.agree(q);
      const float in[3] = {float(m.rank()), 1.0f, float(2 * m.rank())};
      float out[3] = {};
      bool taken = false;
      const int64_t h = me.submit(q, in, out, &taken);
      CHECK(taken);
      // Rank 0's links are the runtime's to read: read them here.
      std::vector<Request> back;
      const auto until = FastPath::Clock::now() + std::chrono::seconds(5);
      while (!me.handles.poll(h) && FastPath::Clock::now() < until) {
        read_rank0_links(m, me);
        me.fast.poll();
        me.fast.step(FastPath::Clock::now(), back);
      }
      CHECK(me.handles.poll(h));
      CHECK(back.empty());
      const float mean = float(n - 1) / 2;
      CHECK_EQ(out[0], mean);
      CHECK_EQ(out[1], 1.0f);
      CHECK_EQ(out[2], 2 * mean);
      CHECK(me.pending.empty());
    });
  }
}

TEST(fast_path_gives_back_what_a_rank_sent_to_rank_0) {
  ring_test::run_ranks(2, [&](Mesh& m) {
    Rank me(m, 2);
    const Request q = small("t0", 2);
    me.agree(q);
    const float in[2] = {1, 2};
    float out[2] = {};
    bool taken = false;
    // Rank 1 submits another shape: not agreed, it goes to rank 0 (slow).
    const Request mine = m.rank() == 1 ? small("t0", 3) : q;
    const float in3[3] = {1, 2, 3};
    float out3[3] = {};
    const int64_t h = me.submit(mine, m.rank() == 1 ? in3 : in, m.rank() == 1 ? out3 : out, &taken);
    CHECK_EQ(taken, m.rank() == 0);
    if (m.rank() == 1) {
      // Tell rank 0 (its round waits for it): one answer, then nothing held.
      std::vector<Request> back;
      const auto until = FastPath::Clock::now() + std::chrono::seconds(5);
      while (!m.readable(0) && FastPath::Clock::now() < until) std::this_thread::yield();
      read_rank0_links(m, me);
      me.fast.step(FastPath::Clock::now(), back);
      CHECK(back.empty());
      return;
    }
    std::vector<Request> back;
    const auto until = FastPath::Clock::now() + std::chrono::seconds(5);
    while (back.empty() && FastPath::Clock::now() < until) {
      read_rank0_links(m, me);
      me.fast.step(FastPath::Clock::now(), back);
    }
    CHECK_EQ(back.size(), (size_t)1);
    CHECK(!me.handles.poll(h));
  });
}
