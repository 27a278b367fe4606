// Template parts of message.h (name <-> cache id mapping is the caller's).
#pragma once

#include <cstring>

namespace ring {

template <class IdOf>
std::vector<uint8_t> ResponseList::encode(IdOf id_of) const {
  ByteWriter w;
  w.u8(shutdown ? 1 : 0);
  encode_error_kind(w, shutdown_kind);
  w.i64(shutdown_rank);
  w.str(shutdown_reason);
  w.u32(static_cast<uint32_t>(cache_puts.size()));
  for (const auto& p : cache_puts) {
    w.str(p.name);
    w.u32(p.id);
  }
  w.u32(static_cast<uint32_t>(responses.size()));
  for (const auto& r : responses) {
    w.u8(static_cast<uint8_t>(r.kind));
    w.u8(static_cast<uint8_t>(r.op));
    w.u32(static_cast<uint32_t>(r.names.size()));
    for (const auto& n : r.names) {
      int64_t id = id_of(n);
      if (id >= 0) {
        w.u8(1);
        w.u32(static_cast<uint32_t>(id));
      } else {
        w.u8(0);
        w.str(n);
      }
    }
    w.i64s(r.sizes);
    w.u8(static_cast<uint8_t>(r.dtype));
    w.u8(static_cast<uint8_t>(r.reduce_op));
    w.f64(r.prescale);
    w.f64(r.postscale);
    w.u32(static_cast<uint32_t>(r.error_kind));
    w.str(r.error);
    encode_device(w, r.device);
    w.i64(r.process_set);
  }
  w.i64(acked);  // last: set_encoded_acked rewrites it
  return std::move(w.buffer());
}

inline void ResponseList::set_encoded_acked(std::vector<uint8_t>& bytes, int64_t acked) {
  if (bytes.size() < sizeof(acked)) throw_error(ErrorKind::Internal, "encoded ResponseList too short");
  std::memcpy(bytes.data() + bytes.size() - sizeof(acked), &acked, sizeof(acked));
}

template <class NameOf>
ResponseList ResponseList::decode(const std::vector<uint8_t>& bytes, NameOf name_of) {
  // Cache puts must be applied before names are resolved, so decoding is
  // two-phase: the caller's name_of sees the puts through `list`.
  ByteReader r(bytes);
  ResponseList list;
  list.shutdown = r.u8() != 0;
  list.shutdown_kind = decode_error_kind(r);
  int64_t who = r.i64();
  if (who < -1 || who > (1 << 30)) throw_error(ErrorKind::Internal, "malformed control message: bad rank");
  list.shutdown_rank = static_cast<int32_t>(who);
  list.shutdown_reason = r.str();
  uint32_t nputs = r.count(1 << 20, 5);
  for (uint32_t i = 0; i < nputs; ++i) {
    CachePut p;
    p.name = r.str();
    p.id = r.u32();
    list.cache_puts.push_back(std::move(p));
  }
  uint32_t nresp = r.count(1 << 20, 14);
  for (uint32_t i = 0; i < nresp; ++i) {
    Response resp;
    uint8_t kind = r.u8(), op = r.u8();
    if (kind > 1 || op >= kNumOpTypes) throw_error(ErrorKind::Internal, "malformed control message: bad response");
    resp.kind = static_cast<ResponseKind>(kind);
    resp.op = static_cast<OpType>(op);
    uint32_t nnames = r.count(1 << 20, 5);
    for (uint32_t k = 0; k < nnames; ++k) {
      if (r.u8() == 1)
        resp.names.push_back(name_of(list, r.u32()));
      else
        resp.names.push_back(r.str());
    }
    resp.sizes = r.i64s();
    uint8_t dtype = r.u8(), rop = r.u8();
    if (!is_valid_dtype(dtype) || !is_valid_reduce_op(rop))
      throw_error(ErrorKind::Internal, "malformed control message: bad response enum");
    resp.dtype = static_cast<DataType>(dtype);
    resp.reduce_op = static_cast<ReduceOp>(rop);
    resp.prescale = r.f64();
    resp.postscale = r.f64();
    // An error of a kind this build does not know is still delivered, as Internal.
    const uint32_t error_kind = r.u32();
    resp.error_kind = is_valid_error_kind(error_kind) ? static_cast<ErrorKind>(error_kind) : ErrorKind::Internal;
    resp.error = r.str(1 << 20);
    resp.device = decode_device(r);
    const int64_t set = r.i64();
    if (set < 0 || set > INT32_MAX) throw_error(ErrorKind::Internal, "malformed control message: bad process set");
    resp.process_set = static_cast<int32_t>(set);
    list.responses.push_back(std::move(resp));
  }
  list.acked = r.i64();
  r.expect_done();
  return list;
}

}  // namespace ring
