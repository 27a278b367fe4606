#include "collectives/tree_order.h"

#include <cstring>

#include "reduce/reduce.h"

namespace ring {

void reduce_ordered(uint8_t* out, const uint8_t* own, const uint8_t* received, size_t len, DataType dtype,
                    ReduceOp op, bool own_first, std::vector<uint8_t>& scratch) {
  const size_t count = len / dtype_size(dtype);
  if (own_first) {
    if (out != own) std::memcpy(out, own, len);
    reduce_into(out, received, count, dtype, op);
    return;
  }
  if (out != own) {  // out = received, then (op) own
    std::memcpy(out, received, len);
    reduce_into(out, own, count, dtype, op);
    return;
  }
  if (scratch.size() < len) scratch.resize(len);
  std::memcpy(scratch.data(), received, len);
  reduce_into(scratch.data(), own, count, dtype, op);
  std::memcpy(out, scratch.data(), len);
}

}  // namespace ring
