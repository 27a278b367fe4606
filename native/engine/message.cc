#include "engine/message.h"

#include "engine/field_value.h"
#include "engine/request_fields.h"

namespace ring {

const char* op_type_name(OpType t) {
  static const char* names[kNumOpTypes] = {"allreduce", "allgather",     "broadcast", "alltoall",
                                           "reducescatter", "barrier", "join"};
  int i = static_cast<int>(t);
  return i >= 0 && i < kNumOpTypes ? names[i] : "unknown";
}

int64_t Request::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t Request::row_elements() const {
  int64_t n = 1;
  for (size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return n;
}

bool Request::operator==(const Request& o) const {
  return all_request_fields([&](const auto& f) { return same_value(this->*f.member, o.*f.member); });
}

bool same_fusion_key(const Request& a, const Request& b) {
  return all_request_fields([&](const auto& f) { return !f.fusion_key || same_value(a.*f.member, b.*f.member); });
}

void Request::encode(ByteWriter& w) const {
  for_each_request_field([&](const auto& f) { encode_value(w, this->*f.member); });
}

Request Request::decode(ByteReader& r) {
  Request q;
  for_each_request_field([&](const auto& f) { decode_value(r, f.max_len, &(q.*f.member)); });
  return q;
}

size_t Request::encoded_bytes() const {
  size_t n = 0;
  for_each_request_field([&](const auto& f) { n += value_bytes(this->*f.member); });
  return n;
}

void encode_error_kind(ByteWriter& w, ErrorKind kind) { w.u8(static_cast<uint8_t>(kind)); }

ErrorKind decode_error_kind(ByteReader& r) {
  const uint8_t kind = r.u8();
  if (!is_valid_error_kind(kind)) throw_error(ErrorKind::Internal, "malformed control message: bad error kind");
  return static_cast<ErrorKind>(kind);
}

void encode_device(ByteWriter& w, const Device& d) {
  w.u8(static_cast<uint8_t>(d.type));
  w.u32(static_cast<uint32_t>(d.index));
}

Device decode_device(ByteReader& r) {
  const uint8_t type = r.u8();
  const uint32_t index = r.u32();
  if (!is_valid_device(type, index)) throw_error(ErrorKind::Internal, "malformed control message: bad device");
  return Device{static_cast<DeviceType>(type), static_cast<int32_t>(index)};
}

std::vector<uint8_t> RequestList::encode() const {
  ByteWriter w;
  w.u8(shutdown ? 1 : 0);
  w.u8(abort ? 1 : 0);
  encode_error_kind(w, abort_kind);
  w.str(abort_reason);
  w.bytes(cache_bits);
  w.u32(static_cast<uint32_t>(requests.size()));
  for (const auto& q : requests) q.encode(w);
  return std::move(w.buffer());
}

RequestList RequestList::decode(const std::vector<uint8_t>& bytes) {
  ByteReader r(bytes);
  RequestList list;
  list.shutdown = r.u8() != 0;
  list.abort = r.u8() != 0;
  list.abort_kind = decode_error_kind(r);
  list.abort_reason = r.str();
  list.cache_bits = r.bytes();
  static const size_t kMinRequestBytes = Request().encoded_bytes();
  uint32_t n = r.count(1 << 20, kMinRequestBytes);
  for (uint32_t i = 0; i < n; ++i) list.requests.push_back(Request::decode(r));
  r.expect_done();
  return list;
}

}  // namespace ring
