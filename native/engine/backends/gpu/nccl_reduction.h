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

// An allreduce run hierarchically (nccl_hierarchical.h) in two stages:
// `local`, NCCL's reduction inside a host, applies every scale factor
// (Average becomes PreMulSum by 1/n, n the ranks of all hosts); `cross`,
// the CPU ring's reduction across hosts, combines the hosts' partial
// results unscaled (Sum, or the request's Min, Max or Product).
struct HierarchicalReduction {
  NcclReduction local;
  ReduceOp cross = ReduceOp::Sum;
};
HierarchicalReduction hierarchical_reduction(const NcclReduction& red, int n);

// Whether response `r`, whose first entry's request is `q`, runs on NCCL
// over `n` ranks (else host-staged).
bool runs_on_nccl(const Response& r, const Request& q, int n);

}  // namespace ring::gpu
