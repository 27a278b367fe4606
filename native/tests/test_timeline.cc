// The timeline: the text each kind of recorded event becomes, and a file
// written through Timeline that is valid, complete and in order.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/timeline.h"
#include "engine/timeline_format.h"
#include "tests/harness.h"

using ring::OpType;
using ring::TimelineBatch;
using ring::TimelineEvent;

TEST(timeline_events_format_as_compact_chrome_trace_lines) {
  TimelineBatch b;
  b.names.push_back("grad \"w\"\n");
  b.events.push_back(TimelineEvent{0, nullptr, 3, 0, 'M'});
  b.events.push_back(TimelineEvent{15, "NEGOTIATE_ALLREDUCE", 3, 0, 'B'});
  b.events.push_back(TimelineEvent{15, nullptr, 3, 1, 'I'});
  b.events.push_back(TimelineEvent{20, nullptr, 3, 0, 'E'});
  b.events.push_back(TimelineEvent{21, "RING_ALLREDUCE", 3, 7, 'S'});
  b.dims = {static_cast<int64_t>(ring::DataType::Float32), 2, 3, 4};
  b.events.push_back(TimelineEvent{30, "ALLREDUCE", 3, 0, 'e'});
  b.events.push_back(TimelineEvent{31, "CYCLE_START", 0, 0, 'C'});
  b.groups = {2, 3, 4};  // a fused batch of rows 3 and 4
  b.events.push_back(TimelineEvent{40, "MEMCPY_IN_FUSION_BUFFER", -1, 5, 'S'});
  b.dims.insert(b.dims.end(), {static_cast<int64_t>(ring::DataType::Int64), 0,
                               static_cast<int64_t>(ring::DataType::Float16), 1, 9});
  b.events.push_back(TimelineEvent{46, "ALLREDUCE", -1, 4, 'e'});
  b.groups.insert(b.groups.end(), {1, 5});  // a negotiation opened by rank 2, at offset 3
  b.events.push_back(TimelineEvent{50, "NEGOTIATE_BROADCAST", -4, 2, 'R'});
  b.groups.insert(b.groups.end(), {2, 5, 6});  // rank 0 ready on rows 5 and 6, at offset 5
  b.events.push_back(TimelineEvent{51, nullptr, -6, 0, 'I'});
  b.events.push_back(TimelineEvent{52, nullptr, -6, 0, 'E'});
  std::string text;
  ring::TimelineText out([&](const char* data, size_t size) { text.append(data, size); });
  ring::format_timeline_batch(b, &out);
  out.flush();
  CHECK_EQ(text, std::string(
      "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":3,\"args\":{\"name\":\"grad \\\"w\\\"\\u000a\"}},\n"
      "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":3,\"args\":{\"sort_index\":3}},\n"
      "{\"ph\":\"B\",\"name\":\"NEGOTIATE_ALLREDUCE\",\"ts\":15,\"pid\":3},\n"
      "{\"ph\":\"i\",\"name\":\"1\",\"ts\":15,\"pid\":3},\n"
      "{\"ph\":\"E\",\"ts\":20,\"pid\":3},\n"
      "{\"ph\":\"X\",\"name\":\"RING_ALLREDUCE\",\"ts\":21,\"dur\":7,\"pid\":3},\n"
      "{\"ph\":\"E\",\"name\":\"ALLREDUCE\",\"ts\":30,\"pid\":3,\"args\":{\"dtype\":\"float32\",\"shape\":\"[3, 4]\"}},\n"
      "{\"ph\":\"i\",\"name\":\"CYCLE_START\",\"ts\":31,\"pid\":0,\"s\":\"g\"},\n"
      "{\"ph\":\"X\",\"name\":\"MEMCPY_IN_FUSION_BUFFER\",\"ts\":40,\"dur\":5,\"pid\":3},\n"
      "{\"ph\":\"X\",\"name\":\"MEMCPY_IN_FUSION_BUFFER\",\"ts\":40,\"dur\":5,\"pid\":4},\n"
      "{\"ph\":\"E\",\"name\":\"ALLREDUCE\",\"ts\":46,\"pid\":3,\"args\":{\"dtype\":\"int64\",\"shape\":\"[]\"}},\n"
      "{\"ph\":\"E\",\"name\":\"ALLREDUCE\",\"ts\":46,\"pid\":4,\"args\":{\"dtype\":\"float16\",\"shape\":\"[9]\"}},\n"
      "{\"ph\":\"B\",\"name\":\"NEGOTIATE_BROADCAST\",\"ts\":50,\"pid\":5},\n"
      "{\"ph\":\"i\",\"name\":\"2\",\"ts\":50,\"pid\":5},\n"
      "{\"ph\":\"i\",\"name\":\"0\",\"ts\":51,\"pid\":5},\n"
      "{\"ph\":\"i\",\"name\":\"0\",\"ts\":51,\"pid\":6},\n"
      "{\"ph\":\"E\",\"ts\":52,\"pid\":5},\n"
      "{\"ph\":\"E\",\"ts\":52,\"pid\":6},\n"));
}

TEST(timeline_text_hands_over_full_buffers_and_pieces_of_any_size) {
  std::vector<size_t> sizes;
  std::string all;
  ring::TimelineText out([&](const char* data, size_t size) {
    sizes.push_back(size);
    all.append(data, size);
  });
  const std::string big(ring::TimelineText::kCapacity * 2 + 5, 'x');
  out.append("ab", 2);
  out.append(big);
  char* p = out.room(3);
  std::memcpy(p, "cde", 3);
  out.commit(p + 3);
  out.flush();
  out.flush();  // nothing left: the sink is not called
  CHECK_EQ(all, "ab" + big + "cde");
  for (size_t s : sizes) CHECK(s > 0 && s <= ring::TimelineText::kCapacity);
}

TEST(timeline_groups_a_list_of_requests_and_writes_a_line_per_tensor) {
  const std::string path = "/tmp/ring_native_timeline_groups_" + std::to_string(::getpid()) + ".json";
  ring::Timeline tl;
  tl.start(path, false);
  std::vector<std::string> names{"a", "b", "c"};
  std::vector<ring::Timeline::Row> rows(names.size());
  const long long t1 = 7, t2 = 9, t3 = 11;
  for (size_t i = 0; i < names.size(); ++i) tl.rank_ready(names[i], &rows[i], OpType::Allreduce, 1, true, t1);
  for (size_t i = 0; i < names.size(); ++i) tl.rank_ready(names[i], &rows[i], OpType::Allreduce, 0, false, t2);
  for (size_t i = 0; i < names.size(); ++i) tl.negotiate_end(names[i], &rows[i], t3);
  tl.stop();
  std::ifstream in(path);
  std::stringstream all;
  all << in.rdbuf();
  std::remove(path.c_str());
  const std::string text = all.str();
  for (int pid = 1; pid <= 3; ++pid) {
    const std::string p = std::to_string(pid);
    const size_t b = text.find(R"({"ph":"B","name":"NEGOTIATE_ALLREDUCE","ts":7,"pid":)" + p + "},\n");
    const size_t i1 = text.find(R"({"ph":"i","name":"1","ts":7,"pid":)" + p + "},\n");
    const size_t i0 = text.find(R"({"ph":"i","name":"0","ts":9,"pid":)" + p + "},\n");
    const size_t e = text.find(R"({"ph":"E","ts":11,"pid":)" + p + "},\n");
    CHECK(b != std::string::npos && i1 != std::string::npos && i0 != std::string::npos && e != std::string::npos);
    CHECK(b < i1 && i1 < i0 && i0 < e);
  }
}

TEST(timeline_file_holds_every_recorded_event_and_closes) {
  const std::string path = "/tmp/ring_native_timeline_" + std::to_string(::getpid()) + ".json";
  ring::Timeline tl;
  tl.start(path, true);
  ring::Request q;
  q.name = "a";
  q.op = OpType::Allreduce;
  q.shape = {2};
  ring::Timeline::Row cache;
  constexpr int kSteps = 10000;  // 80,000 events: more than one batch, the writer wakes early
  for (int step = 0; step < kSteps; ++step) {
    tl.rank_ready(q.name, &cache, q.op, 0, true);
    tl.rank_ready(q.name, &cache, q.op, 1, false);
    tl.negotiate_end(q.name, &cache);
    std::vector<int> rows;
    std::vector<const std::string*> names{&q.name};
    tl.rows(names, {}, 0, &rows);
    tl.begin(rows, "ALLREDUCE");
    tl.span(rows, "RING_ALLREDUCE", tl.now());
    tl.end_ops(rows, {&q});
    tl.cycle_start();
  }
  tl.stop();
  struct stat st {};
  CHECK(::stat(path.c_str(), &st) == 0);
  // The blocks reserved ahead of the text (16 MiB) were given back.
  CHECK(static_cast<long long>(st.st_blocks) * 512 <= static_cast<long long>(st.st_size) + (1 << 20));
  std::ifstream in(path);
  std::stringstream all;
  all << in.rdbuf();
  const std::string text = all.str();
  std::remove(path.c_str());
  CHECK(text.rfind("[\n", 0) == 0);
  CHECK(text.size() > 4 && text.compare(text.size() - 4, 4, "{}]\n") == 0);
  size_t lines = 0, ends = 0;
  for (size_t pos = 0; (pos = text.find('\n', pos)) != std::string::npos; ++pos) ++lines;
  for (size_t pos = 0; (pos = text.find("\"name\":\"ALLREDUCE\",\"ts\"", pos)) != std::string::npos; ++pos) ++ends;
  // "[", 2 + 2 row lines, 8 events per step, "{}]"
  CHECK_EQ(lines, static_cast<size_t>(1 + 4 + 8 * kSteps + 1));
  CHECK_EQ(ends, static_cast<size_t>(2 * kSteps));  // each step's ALLREDUCE begins and ends
}
