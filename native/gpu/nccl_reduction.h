// How a reduction request maps onto NCCL, decided from the request alone so
// that every rank decides alike (pure functions; no NCCL call).
//
// Sum and Average with scale factors become one NCCL reduction: Sum, Avg,
// or PreMulSum by prescale * postscale (/ n for Average), the scaling
// folded into the reduction instead of a kernel before and after it.
// Integer tensors take only unscaled Sum, Min, Max and Product (an integer
// average or a scaled integer follow the CPU ring's rounding there: they
// run host-staged), as do dtypes NCCL has no type for (int16, bool) and
// Adasum.
#pragma once

#include <optional>

#include "common/types.h"
#include "engine/message.h"
#include "gpu/nccl.h"

namespace ring::gpu {

// NCCL's type for `dtype`, or none (int16, bool).
std::optional<ncclDataType_t> nccl_type(DataType dtype);

struct NcclReduction {
  ncclRedOp_t op = ncclSum;  // ncclSum, ncclAvg, ncclMin, ncclMax or ncclProd
  bool premul = false;       // PreMulSum by `factor` instead of `op`
  double factor = 1.0;
};

// The NCCL reduction of request `q` over `n` ranks, or none when it runs
// host-staged.
std::optional<NcclReduction> nccl_reduction(const Request& q, int n);

// Whether response `r`, whose first entry's request is `q`, runs on NCCL
// over `n` ranks (else host-staged).
bool runs_on_nccl(const Response& r, const Request& q, int n);

}  // namespace ring::gpu
