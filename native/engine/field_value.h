// What the engine does with a value of each type a Request field may have
// (engine/request_fields.h): its wire encoding and size, equality, and its
// text in error messages. A field of a new type needs one overload of each.
//
// decode_value reads what encode_value wrote and throws RingError(Internal)
// for anything malformed: an enum or device out of range, a string or list
// longer than `limit` or than the bytes left (checked before allocating).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/device.h"
#include "common/types.h"
#include "engine/message.h"
#include "engine/wire.h"

namespace ring {

constexpr int enum_count(OpType) { return kNumOpTypes; }
constexpr int enum_count(DataType) { return kNumDataTypes; }
constexpr int enum_count(ReduceOp) { return kNumReduceOps; }

inline void encode_value(ByteWriter& w, const std::string& v) { w.str(v); }
inline void encode_value(ByteWriter& w, int32_t v) { w.u32(static_cast<uint32_t>(v)); }
inline void encode_value(ByteWriter& w, double v) { w.f64(v); }
inline void encode_value(ByteWriter& w, const std::vector<int64_t>& v) { w.i64s(v); }
inline void encode_value(ByteWriter& w, const Device& v) { encode_device(w, v); }
template <class E, class = decltype(enum_count(E{}))>
void encode_value(ByteWriter& w, E v) {
  w.u8(static_cast<uint8_t>(v));
}

inline void decode_value(ByteReader& r, size_t limit, std::string* v) { *v = r.str(limit); }
inline void decode_value(ByteReader& r, size_t, int32_t* v) { *v = static_cast<int32_t>(r.u32()); }
inline void decode_value(ByteReader& r, size_t, double* v) { *v = r.f64(); }
inline void decode_value(ByteReader& r, size_t limit, std::vector<int64_t>* v) { *v = r.i64s(limit); }
inline void decode_value(ByteReader& r, size_t, Device* v) { *v = decode_device(r); }
template <class E, class = decltype(enum_count(E{}))>
void decode_value(ByteReader& r, size_t, E* v) {
  const uint8_t raw = r.u8();
  if (raw >= enum_count(E{})) throw_error(ErrorKind::Internal, "malformed control message: bad request enum");
  *v = static_cast<E>(raw);
}

inline size_t value_bytes(const std::string& v) { return 4 + v.size(); }
inline size_t value_bytes(int32_t) { return 4; }
inline size_t value_bytes(double) { return 8; }
inline size_t value_bytes(const std::vector<int64_t>& v) { return 4 + 8 * v.size(); }
inline size_t value_bytes(const Device&) { return 5; }
template <class E, class = decltype(enum_count(E{}))>
size_t value_bytes(E) {
  return 1;
}

// Equality. Two NaN scale factors are the same request (a NaN is never
// equal to itself, yet every rank asked for the same thing).
template <class T>
bool same_value(const T& a, const T& b) {
  return a == b;
}
inline bool same_value(double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); }
// Ranks agree on the kind of device, not its index: with one process per
// GPU, rank r's tensors are on its own GPU (cuda:<local rank>, or cuda:0
// when each process sees only its own). Each rank runs on its own device.
inline bool same_value(const Device& a, const Device& b) { return a.type == b.type; }

// The text of a value in error messages: "float32", "[3, 4]", "0.5", "cuda:1".
std::string describe_value(const std::string& v);
std::string describe_value(OpType v);
std::string describe_value(DataType v);
std::string describe_value(ReduceOp v);
std::string describe_value(int32_t v);
std::string describe_value(double v);
std::string describe_value(const std::vector<int64_t>& v);
std::string describe_value(const Device& v);

}  // namespace ring
