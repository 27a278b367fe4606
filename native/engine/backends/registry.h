// The backend registry: the one list of the executor's backends and the
// order the executor asks them in (engine/backend.h: the first one enabled
// for a response runs it). A new backend is added here, ahead of the ones
// it should win over; the runtime only hands over what backends are built
// from.
//
// The order, first asked first:
//   1. cpu ring       host memory (cpu_ring/cpu_ring.h)
//   2. nccl           GPU memory on the engine's own streams (gpu/nccl_backend.h)
//   3. host-staged    GPU memory through pinned host memory and the CPU ring
//                     (gpu/host_staged.h): what NCCL does not run
#pragma once

#include <string>
#include <vector>

#include "engine/config.h"
#include "engine/executor.h"
#include "engine/handle_table.h"
#include "engine/process_sets.h"
#include "engine/timeline.h"
#include "transport/mesh.h"

namespace ring {

// This rank's place in the job, as the backends see it.
struct BackendLayout {
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  int cross_rank = 0;
  int cross_size = 1;
  // Every host holds the same number of ranks, consecutive in rank order
  // (hosts_laid_out_evenly over every rank's host: alike on every rank).
  bool even_hosts = true;
};

// Whether `host_of_rank` (rank r's host id at r) gives every host the same
// number of ranks, consecutive in rank order.
bool hosts_laid_out_evenly(const std::vector<std::string>& host_of_rank);

// What one job's backends are built from. Every pointer is owned by the
// runtime and outlives the executor the backends are added to.
struct BackendParts {
  Mesh* data = nullptr;  // the job's data mesh (every rank)
  HandleTable* handles = nullptr;
  const ProcessSetTable* sets = nullptr;
  const Config* config = nullptr;
  Timeline* timeline = nullptr;  // where execution phases go; null: nowhere
  BackendLayout layout;
};

// Whether RING_HIERARCHICAL_ALLREDUCE (`mode`: 0 off, 1 on, < 0 when there
// are several hosts of several ranks) asks for the hierarchical allreduce
// in layout `o`.
inline bool hierarchy_wanted(int mode, const BackendLayout& o) {
  return mode > 0 || (mode < 0 && o.cross_size > 1 && o.local_size > 1);
}

// Whether the ranks are laid out host by host with the same number on
// every host, as the hierarchical allreduce needs: the job's hosts (alike
// on every rank; this rank's sizes alone pass on a host of average size
// among uneven ones) and this rank's place.
inline bool host_by_host(const BackendLayout& o) {
  return o.even_hosts && o.local_size * o.cross_size == o.size &&
         o.rank == o.cross_rank * o.local_size + o.local_rank;
}

// Whether add_backends sets the hierarchical allreduce up in layout `o`.
inline bool hierarchy_used(int mode, const BackendLayout& o) { return hierarchy_wanted(mode, o) && host_by_host(o); }

// Builds every backend from `parts` and adds them to `executor` in the
// order above. RING_HIERARCHICAL_ALLREDUCE gives the CPU ring this host's
// and this local rank's subgroups of the data mesh when the ranks are laid
// out host by host (else a warning, and the flat ring). Call once, before
// the executor's first run(); throws RingError when a subgroup mesh cannot
// be made.
void add_backends(Executor& executor, const BackendParts& parts);

}  // namespace ring
