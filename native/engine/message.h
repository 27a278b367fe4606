// The negotiation protocol's messages.
//
// A worker tells the coordinator (rank 0) which tensors it has ready in a
// RequestList: tensors the response cache knows are a bit in a bit vector,
// the others a full Request. The coordinator answers every rank with the
// same ResponseList: what to execute, in which order, fused how; errors for
// tensors whose requests disagree; new response-cache entries; and, per
// receiver, how many of its RequestLists it has consumed (flow control).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/device.h"
#include "common/error.h"
#include "common/types.h"
#include "engine/wire.h"

namespace ring {

// OpType lives in common/types.h (framework kernels use its codes).
const char* op_type_name(OpType t);

// What one rank asks for one named tensor. Each field is also declared in
// kRequestFields (engine/request_fields.h), which drives the wire format,
// equality, the coordinator's agreement checks and the fusion key: a new
// field is a member here plus one entry there.
struct Request {
  std::string name;
  OpType op = OpType::Allreduce;
  DataType dtype = DataType::Float32;
  ReduceOp reduce_op = ReduceOp::Sum;
  int32_t root = 0;
  double prescale = 1.0;
  double postscale = 1.0;
  std::vector<int64_t> shape;
  std::vector<int64_t> splits;  // alltoall: rows sent to each rank
  Device device;
  int32_t process_set = 0;  // the set's id (engine/process_sets.h); 0: every rank

  int64_t num_elements() const;
  int64_t row_elements() const;  // elements per first-dimension row
  // What a reduction's result over n ranks is scaled by: postscale, times
  // 1/n for Average (every CPU reduction path applies this one).
  double post_factor(int n) const { return postscale * (reduce_op == ReduceOp::Average ? 1.0 / n : 1.0); }
  bool operator==(const Request& o) const;
  bool operator!=(const Request& o) const { return !(*this == o); }
  void encode(ByteWriter& w) const;
  static Request decode(ByteReader& r);
  size_t encoded_bytes() const;  // what encode() writes
};

// True when two allreduces may share one fused response (every field
// kRequestFields marks as part of the fusion key is equal).
bool same_fusion_key(const Request& a, const Request& b);

struct RequestList {
  bool shutdown = false;
  // A worker that failed (lost a peer, timed out) tells rank 0 why before
  // it leaves, so every rank reports the cause rather than its side effects.
  bool abort = false;
  ErrorKind abort_kind = ErrorKind::Internal;
  std::string abort_reason;
  std::vector<uint8_t> cache_bits;  // bit i set: cached entry i is ready here
  std::vector<Request> requests;    // tensors not (or no longer) cached

  std::vector<uint8_t> encode() const;
  static RequestList decode(const std::vector<uint8_t>& bytes);
};

enum class ResponseKind : uint8_t { Execute = 0, Error = 1 };

// One unit of work. Execute: `op` on `names` (several only for fused
// allreduce). Error: every rank fails `names` with error_kind/message.
struct Response {
  ResponseKind kind = ResponseKind::Execute;
  OpType op = OpType::Allreduce;
  std::vector<std::string> names;
  // Allgather: first dimension of every rank. Alltoall: size*size matrix,
  // entry [i*size + j] = rows rank i sends to rank j. Allreduce: element
  // count of every name (a joined rank contributes zeros of that size).
  // Join: the rank that joined last.
  std::vector<int64_t> sizes;
  // Allreduce: what a joined rank needs to take part without a request.
  DataType dtype = DataType::Float32;
  ReduceOp reduce_op = ReduceOp::Sum;
  double prescale = 1.0;
  double postscale = 1.0;
  Device device;  // of every tensor in `names`: chooses the backend
  int32_t process_set = 0;  // of every tensor in `names`: its members execute it
  ErrorKind error_kind = ErrorKind::Internal;
  std::string error;
  // Rank 0 only, never sent: each name's row in the timeline file numbered
  // timeline_file, as the negotiation found them (saves a lookup each).
  std::vector<int32_t> timeline_rows;
  uint64_t timeline_file = 0;
};

struct CachePut {
  std::string name;
  uint32_t id;
};

// Wire helpers shared by both lists (message.cc).
void encode_error_kind(ByteWriter& w, ErrorKind kind);
// Throws RingError(Internal) for a value that names no ErrorKind.
ErrorKind decode_error_kind(ByteReader& r);
void encode_device(ByteWriter& w, const Device& d);
// Throws RingError(Internal) for a device type or index out of range.
Device decode_device(ByteReader& r);

struct ResponseList {
  bool shutdown = false;
  ErrorKind shutdown_kind = ErrorKind::Shutdown;  // Shutdown, or the failure that ended the job
  int32_t shutdown_rank = -1;  // the rank whose shutdown() ended the job, if one did
  std::string shutdown_reason;
  std::vector<CachePut> cache_puts;  // applied before `responses` are read
  std::vector<Response> responses;
  int64_t acked = 0;  // RequestLists of the receiver consumed so far

  // Names of cached tensors are sent as ids: `id_of` maps a name to its id
  // or -1, `name_of` maps back. Both sides apply cache_puts first.
  template <class IdOf>
  std::vector<uint8_t> encode(IdOf id_of) const;
  template <class NameOf>
  static ResponseList decode(const std::vector<uint8_t>& bytes, NameOf name_of);
  // Rewrites `acked` in an encoded list (its last field), so that one
  // encoding serves every worker.
  static void set_encoded_acked(std::vector<uint8_t>& bytes, int64_t acked);
};

}  // namespace ring

#include "engine/message_impl.h"
