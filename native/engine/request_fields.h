// The fields of a Request, declared once.
//
// kRequestFields lists every member of Request with what the engine does
// with it; Request's encode / decode / operator==, the coordinator's
// agreement checks with their error text and the allreduce fusion key all
// iterate this table. Adding a field is one member in message.h, one entry
// here, and the code that uses its value.
//
// Entry (built by field(label, &Request::member) and the modifiers below):
//   label       how errors name it: "Mismatched <label> for tensor 'x': ..."
//   member      the Request member; its type picks the wire encoding and
//               the text of a value (field_value.h)
//   limit(n)    strings and lists: decode refuses more than n elements
//   agree(ops)  the ranks must submit equal values for these operations
//   agree_rows(ops, count_label, rest_label)
//               lists of dimensions concatenated along the first: the ranks
//               must agree on the number of elements (count_label), then on
//               every element but the first (rest_label)
//   fuse()      two allreduces fuse into one response only when equal here
//
// The order is the wire order, and the order in which agreement is checked
// (the first field that differs is the one reported). "operation" comes
// before every field whose agreement depends on the operation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <tuple>
#include <type_traits>
#include <vector>

#include "engine/message.h"

namespace ring {

// A set of operations, one bit per OpType.
using OpMask = uint32_t;
constexpr OpMask op_bit(OpType op) { return OpMask(1) << static_cast<int>(op); }
constexpr OpMask kEveryOp = (OpMask(1) << kNumOpTypes) - 1;
// Operations that reduce: they agree on everything that shapes the result.
constexpr OpMask kReducingOps = op_bit(OpType::Allreduce) | op_bit(OpType::Reducescatter);
// Operations that concatenate the ranks' tensors along the first dimension.
constexpr OpMask kConcatenatingOps = op_bit(OpType::Allgather) | op_bit(OpType::Alltoall);

template <class T>
struct RequestField {
  using Type = T;
  const char* label;
  T Request::*member;
  size_t max_len = 0;
  OpMask agree_ops = 0;
  OpMask rows_ops = 0;
  const char* count_label = nullptr;
  const char* rest_label = nullptr;
  bool fusion_key = false;

  constexpr RequestField limit(size_t n) const {
    RequestField f = *this;
    f.max_len = n;
    return f;
  }
  constexpr RequestField agree(OpMask ops) const {
    RequestField f = *this;
    f.agree_ops = ops;
    return f;
  }
  constexpr RequestField agree_rows(OpMask ops, const char* count, const char* rest) const {
    static_assert(std::is_same_v<T, std::vector<int64_t>>, "agree_rows applies to lists of dimensions");
    RequestField f = *this;
    f.rows_ops = ops;
    f.count_label = count;
    f.rest_label = rest;
    return f;
  }
  constexpr RequestField fuse() const {
    RequestField f = *this;
    f.fusion_key = true;
    return f;
  }
};

template <class T>
constexpr RequestField<T> field(const char* label, T Request::*member) {
  return RequestField<T>{label, member};
}

constexpr size_t kMaxNameBytes = 1 << 16;
constexpr size_t kMaxDims = 64;
constexpr size_t kMaxSplits = 1 << 20;

inline constexpr auto kRequestFields = std::make_tuple(
    field("name", &Request::name).limit(kMaxNameBytes),
    field("operation", &Request::op).agree(kEveryOp),
    field("dtype", &Request::dtype).agree(kEveryOp).fuse(),
    field("reduce op", &Request::reduce_op).agree(kReducingOps).fuse(),
    field("root rank", &Request::root).agree(op_bit(OpType::Broadcast)),
    field("prescale_factor", &Request::prescale).agree(kReducingOps).fuse(),
    field("postscale_factor", &Request::postscale).agree(kReducingOps).fuse(),
    field("shape", &Request::shape)
        .limit(kMaxDims)
        .agree(kReducingOps | op_bit(OpType::Broadcast))
        .agree_rows(kConcatenatingOps, "rank (number of dimensions)", "shape after the first dimension"),
    field("splits", &Request::splits).limit(kMaxSplits),  // alltoall: each rank's own
    field("device", &Request::device).agree(kEveryOp).fuse(),  // its type (field_value.h: same_value)
    field("process set", &Request::process_set).agree(kEveryOp).fuse());

// Calls fn(entry) for every entry of kRequestFields, in order.
template <class Fn>
void for_each_request_field(Fn&& fn) {
  std::apply([&](const auto&... entry) { (fn(entry), ...); }, kRequestFields);
}

// True when fn(entry) is true for every entry (stops at the first false).
template <class Fn>
bool all_request_fields(Fn&& fn) {
  return std::apply([&](const auto&... entry) { return (fn(entry) && ...); }, kRequestFields);
}

}  // namespace ring
