#include "engine/message.h"

namespace ring {
namespace {

constexpr size_t kMaxDims = 64;

}  // namespace

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
  return name == o.name && op == o.op && dtype == o.dtype && reduce_op == o.reduce_op && root == o.root &&
         prescale == o.prescale && postscale == o.postscale && shape == o.shape && splits == o.splits;
}

void Request::encode(ByteWriter& w) const {
  w.str(name);
  w.u8(static_cast<uint8_t>(op));
  w.u8(static_cast<uint8_t>(dtype));
  w.u8(static_cast<uint8_t>(reduce_op));
  w.u32(static_cast<uint32_t>(root));
  w.f64(prescale);
  w.f64(postscale);
  w.i64s(shape);
  w.i64s(splits);
}

Request Request::decode(ByteReader& r) {
  Request q;
  q.name = r.str();
  uint8_t op = r.u8(), dtype = r.u8(), rop = r.u8();
  if (op >= kNumOpTypes || !is_valid_dtype(dtype) || !is_valid_reduce_op(rop))
    throw_error(ErrorKind::Internal, "malformed control message: bad request enum");
  q.op = static_cast<OpType>(op);
  q.dtype = static_cast<DataType>(dtype);
  q.reduce_op = static_cast<ReduceOp>(rop);
  q.root = static_cast<int32_t>(r.u32());
  q.prescale = r.f64();
  q.postscale = r.f64();
  q.shape = r.i64s(kMaxDims);
  q.splits = r.i64s();
  return q;
}

std::vector<uint8_t> RequestList::encode() const {
  ByteWriter w;
  w.u8(shutdown ? 1 : 0);
  w.u8(abort ? 1 : 0);
  w.u8(static_cast<uint8_t>(abort_kind));
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
  list.abort_kind = r.u8();
  if (list.abort_kind > 5) throw_error(ErrorKind::Internal, "malformed control message: bad error kind");
  list.abort_reason = r.str();
  list.cache_bits = r.bytes();
  uint32_t n = r.count(1 << 20, 30);
  for (uint32_t i = 0; i < n; ++i) list.requests.push_back(Request::decode(r));
  r.expect_done();
  return list;
}

}  // namespace ring
