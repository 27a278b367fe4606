#include "engine/backends/registry.h"

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/log.h"
#include "engine/backends/cpu_ring/cpu_ring.h"
#include "engine/backends/gpu/host_staged.h"
#include "engine/backends/gpu/nccl_backend.h"

namespace ring {
namespace {

// RING_HIERARCHICAL_ALLREDUCE (Config::hierarchical_allreduce: 0 off, 1 on,
// < 0 when there are several hosts of several ranks): the CPU ring's
// subgroups, when the ranks are laid out host by host.
void setup_hierarchy(CpuRingBackend& cpu, Mesh& data, const Config& config, const BackendLayout& o) {
  if (!hierarchy_wanted(config.hierarchical_allreduce, o)) return;
  if (!host_by_host(o)) {  // a warning where the user asked for it, else a note
    log_line(config.hierarchical_allreduce > 0 ? LogLevel::Warning : LogLevel::Info,
             "hierarchical allreduce needs the ranks laid out host by host with the same number on every host; "
             "using the flat ring");
    return;
  }
  std::vector<int> local, cross;
  for (int i = 0; i < o.local_size; ++i) local.push_back(o.cross_rank * o.local_size + i);
  for (int c = 0; c < o.cross_size; ++c) cross.push_back(c * o.local_size + o.local_rank);
  cpu.set_hierarchy(data.subgroup(local), data.subgroup(cross));
  log_line(LogLevel::Info, "hierarchical allreduce: " + std::to_string(o.cross_size) + " hosts of " +
                               std::to_string(o.local_size) + " ranks");
}

}  // namespace

bool hosts_laid_out_evenly(const std::vector<std::string>& host_of_rank) {
  const size_t n = host_of_rank.size();
  size_t per_host = 1;
  while (per_host < n && host_of_rank[per_host] == host_of_rank[0]) ++per_host;
  if (n == 0) return true;
  if (n % per_host) return false;
  std::set<std::string> seen;
  for (size_t first = 0; first < n; first += per_host) {
    for (size_t r = first; r < first + per_host; ++r)
      if (host_of_rank[r] != host_of_rank[first]) return false;
    if (!seen.insert(host_of_rank[first]).second) return false;  // a host's ranks in two runs
  }
  return true;
}

void add_backends(Executor& executor, const BackendParts& parts) {
  const Config& config = *parts.config;
  const BackendLayout& layout = parts.layout;
  auto cpu = std::make_unique<CpuRingBackend>(parts.data, parts.handles, parts.sets);
  cpu->set_allreduce_choice(config.allreduce_mode, layout.local_size == layout.size);
  setup_hierarchy(*cpu, *parts.data, config, layout);
  cpu->set_timeline(parts.timeline);
  // GPU tensors: NCCL where it runs the response, else host-staged; both
  // use the CPU ring (process sets' meshes, staged operations), which the
  // executor holds as long as them.
  CpuRingBackend* ring = cpu.get();
  auto staged = std::make_unique<gpu::HostStagedBackend>(ring, layout.local_rank);
  auto nccl = std::make_unique<gpu::NcclBackend>(ring, staged.get(), parts.handles, config, layout.local_rank);
  nccl->set_timeline(parts.timeline);
  executor.add_backend(std::move(cpu));
  executor.add_backend(std::move(nccl));
  executor.add_backend(std::move(staged));
}

}  // namespace ring
