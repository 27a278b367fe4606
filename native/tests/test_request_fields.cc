// The request field table (engine/request_fields.h): every field travels,
// counts for equality, is checked for agreement as declared, and the fusion
// key is exactly the fields marked for it. The checks iterate the table, so
// a new field is covered as soon as it is declared (a field of a new type
// needs a `changed` overload here).
#include <cmath>
#include <set>
#include <string>

#include "engine/agreement.h"
#include "engine/coordinator.h"
#include "engine/field_value.h"
#include "engine/request_fields.h"
#include "tests/harness.h"

using namespace ring;

namespace {

// A value different from `v`, valid on the wire.
std::string changed(const std::string& v) { return v + "x"; }
int32_t changed(int32_t v) { return v + 1; }
double changed(double v) { return v + 0.5; }
std::vector<int64_t> changed(std::vector<int64_t> v) {
  v.push_back(7);
  return v;
}
Device changed(const Device& d) {
  return d.type == DeviceType::CPU ? Device{DeviceType::CUDA, 1} : Device{DeviceType::CPU, 0};
}
template <class E, class = decltype(enum_count(E{}))>
E changed(E v) {
  return static_cast<E>((static_cast<int>(v) + 1) % enum_count(E{}));
}

// A request with a value other than the default in every field.
Request sample() {
  Request q;
  q.name = "layer.3/weight";
  q.op = OpType::Alltoall;
  q.dtype = DataType::BFloat16;
  q.reduce_op = ReduceOp::Max;
  q.root = 2;
  q.prescale = 0.25;
  q.postscale = -3.0;
  q.shape = {6, 5, 4};
  q.splits = {1, 0, 5};
  q.device = Device{DeviceType::CUDA, 3};
  return q;
}

Request round_trip(const Request& q) {
  ByteWriter w;
  q.encode(w);
  CHECK_EQ(w.buffer().size(), q.encoded_bytes());
  ByteReader r(w.buffer());
  Request back = Request::decode(r);
  CHECK(r.done());
  return back;
}

Request allreduce(const std::string& name, std::vector<int64_t> shape) {
  Request q;
  q.name = name;
  q.shape = std::move(shape);
  return q;
}

// The error the coordinator reports when rank 1's request differs from
// rank 0's and rank 2's.
std::string mismatch(const Request& same, const Request& other) {
  ResponseCache cache(16, 3);
  Coordinator c(3, &cache, 1 << 20);
  c.add_request(0, same);
  c.add_request(1, other);
  c.add_request(2, same);
  ResponseList list = c.take();
  CHECK_EQ(list.responses.size(), (size_t)1);
  return list.responses.empty() ? "" : list.responses[0].error;
}

}  // namespace

TEST(request_fields_round_trip_every_field) {
  const Request q = sample();
  const Request back = round_trip(q);
  CHECK(back == q);
  for_each_request_field([&](const auto& f) {
    if (!same_value(back.*f.member, q.*f.member))
      ring_test::record_failure(__FILE__, __LINE__, std::string("field lost on the wire: ") + f.label);
    Request other = q;
    other.*f.member = changed(q.*f.member);
    const Request other_back = round_trip(other);
    if (!same_value(other_back.*f.member, other.*f.member))
      ring_test::record_failure(__FILE__, __LINE__, std::string("changed field lost on the wire: ") + f.label);
  });
}

TEST(request_fields_each_counts_for_equality) {
  const Request q = sample();
  int fields = 0;
  for_each_request_field([&](const auto& f) {
    Request other = q;
    other.*f.member = changed(q.*f.member);
    if (other == q) ring_test::record_failure(__FILE__, __LINE__, std::string("equal despite ") + f.label);
    ++fields;
  });
  CHECK_EQ(fields, (int)std::tuple_size<std::decay_t<decltype(kRequestFields)>>::value);
  Request nan = q, nan2 = q;  // the same NaN request twice is the same request
  nan.prescale = nan2.prescale = std::nan("");
  CHECK(nan == nan2);
}

TEST(request_fields_fusion_key) {
  const Request q = sample();
  std::set<std::string> key;
  for_each_request_field([&](const auto& f) {
    Request other = q;
    other.*f.member = changed(q.*f.member);
    if (same_fusion_key(q, other) == f.fusion_key)
      ring_test::record_failure(__FILE__, __LINE__, std::string("fusion key and the table disagree on ") + f.label);
    if (f.fusion_key) key.insert(f.label);
  });
  const std::set<std::string> expected = {"dtype", "reduce op", "prescale_factor", "postscale_factor", "device",
                                          "process set"};
  CHECK(key == expected);
}

TEST(request_decode_rejects_malformed_fields) {
  ByteWriter w;
  sample().encode(w);
  const std::vector<uint8_t> good = w.buffer();
  for (size_t len = 0; len < good.size(); ++len) {  // every truncation
    ByteReader r(good.data(), len);
    CHECK_THROWS_KIND(Request::decode(r), ErrorKind::Internal);
  }
  std::vector<uint8_t> bad_device = good;
  bad_device[good.size() - 5] = kNumDeviceTypes;  // device type byte, before its u32 index
  ByteReader r1(bad_device);
  CHECK_THROWS_KIND(Request::decode(r1), ErrorKind::Internal);
  std::vector<uint8_t> bad_op = good;
  bad_op[4 + sample().name.size()] = kNumOpTypes;  // the byte after the name
  ByteReader r2(bad_op);
  CHECK_THROWS_KIND(Request::decode(r2), ErrorKind::Internal);
  RequestList list;
  list.abort_kind = ErrorKind::Shutdown;
  std::vector<uint8_t> bytes = list.encode();
  bytes[2] = kNumErrorKinds;  // shutdown, abort, then the kind
  CHECK_THROWS_KIND(RequestList::decode(bytes), ErrorKind::Internal);
}

TEST(agreement_names_field_tensor_and_ranks) {
  Request a = allreduce("w", {4});
  Request b = a;
  b.device = Device{DeviceType::CUDA, 0};
  CHECK_EQ(mismatch(a, b), std::string("Mismatched device for tensor 'w': ranks 0, 2: cpu; rank 1: cuda:0"));
  b = a;
  b.prescale = 1.0000001;  // differs beyond six digits: shown with enough of them
  CHECK_EQ(mismatch(a, b), std::string("Mismatched prescale_factor for tensor 'w': ranks 0, 2: 1; rank 1: 1.0000001"));
  a.op = b.op = OpType::Broadcast;
  b = a;
  b.root = 1;
  CHECK_EQ(mismatch(a, b), std::string("Mismatched root rank for tensor 'w': ranks 0, 2: 0; rank 1: 1"));
  a.op = OpType::Allgather;
  a.shape = {3, 4};
  b = a;
  b.shape = {5, 4};  // the first dimension may differ
  CHECK_EQ(mismatch(a, b), std::string(""));
  b.shape = {5, 4, 1};
  CHECK_EQ(mismatch(a, b),
           std::string("Mismatched rank (number of dimensions) for tensor 'w': ranks 0, 2: 2; rank 1: 3"));
  b.shape = {3, 2};
  CHECK_EQ(mismatch(a, b),
           std::string("Mismatched shape after the first dimension for tensor 'w': ranks 0, 2: [4]; rank 1: [2]"));
  b = a;
  b.op = OpType::Alltoall;
  CHECK_EQ(mismatch(a, b), std::string("Mismatched operation for tensor 'w': ranks 0, 2: allgather; rank 1: alltoall"));
}

TEST(agreement_ignores_fields_the_operation_does_not_use) {
  Request a = allreduce("b", {4});
  a.op = OpType::Broadcast;
  Request b = a;
  b.reduce_op = ReduceOp::Max;  // broadcast does not reduce
  b.prescale = 2.0;
  CHECK_EQ(mismatch(a, b), std::string(""));
  a.prescale = b.prescale = std::nan("");  // NaN on every rank is agreement
  a.op = b.op = OpType::Allreduce;
  b.reduce_op = a.reduce_op;
  CHECK_EQ(mismatch(a, b), std::string(""));
}

TEST(coordinator_fuses_only_one_device) {
  ResponseCache cache(16, 2);
  Coordinator c(2, &cache, 1 << 20);
  Request on_gpu = allreduce("g", {4});
  on_gpu.device = Device{DeviceType::CUDA, 0};
  for (int r = 0; r < 2; ++r) {
    c.add_request(r, allreduce("a", {4}));
    c.add_request(r, on_gpu);
    c.add_request(r, allreduce("b", {4}));
  }
  ResponseList list = c.take();
  CHECK_EQ(list.responses.size(), (size_t)2);
  CHECK_EQ(list.responses[0].names.size(), (size_t)2);  // a, b
  CHECK(list.responses[0].device == Device{});
  CHECK_EQ(list.responses[1].names[0], std::string("g"));
  CHECK(list.responses[1].device == on_gpu.device);
}

TEST(response_list_carries_device_and_error_kind) {
  ResponseList list;
  list.shutdown_kind = ErrorKind::Timeout;
  Response r;
  r.names = {"x"};
  r.device = Device{DeviceType::CUDA, 2};
  r.kind = ResponseKind::Error;
  r.error_kind = ErrorKind::Mismatch;
  list.responses.push_back(r);
  auto bytes = list.encode([](const std::string&) -> int64_t { return -1; });
  auto back = ResponseList::decode(bytes, [](const ResponseList&, uint32_t) { return std::string(); });
  CHECK(back.shutdown_kind == ErrorKind::Timeout);
  CHECK(back.responses[0].device == r.device);
  CHECK(back.responses[0].error_kind == ErrorKind::Mismatch);
  bytes[1] = kNumErrorKinds;  // shutdown flag, then its kind
  CHECK_THROWS_KIND(ResponseList::decode(bytes, [](const ResponseList&, uint32_t) { return std::string(); }),
                    ErrorKind::Internal);
}
