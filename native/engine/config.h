// Config: every knob of the engine, parsed once from the environment.
//
// Each knob is one row of a table (RING_ name, HOROVOD_ alias, default,
// doc); the RING_ name wins when both are set. Values are spelled as
// engine/config_value.h says. A bad value is a RingError(BadArgument) that
// names the variable the user set (RING_ or HOROVOD_) and quotes the value.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "collectives/allreduce_choice.h"
#include "common/cache_tuning.h"
#include "common/log.h"

namespace ring {

struct Config {
  size_t fusion_threshold_bytes = 64u << 20;
  double cycle_time_ms = 1.0;
  size_t cache_capacity = 1024;
  double timeout_seconds = 30.0;
  bool force_tcp = false;
  LogLevel log_level = LogLevel::Warning;
  // Rank 0 warns about tensors that some ranks submitted and others have
  // not after this long (0: never); the job fails after the second (0: never).
  double stall_check_seconds = 60.0;
  double stall_shutdown_seconds = 0.0;
  std::string timeline_path;  // empty: no timeline
  // Hierarchical allreduce: 1 on, 0 off, -1 (auto) on for jobs of several
  // hosts with several ranks on each.
  int hierarchical_allreduce = -1;
  // RING_ALLREDUCE_ALGORITHM (collectives/allreduce_choice.h).
  AllreduceMode allreduce_mode = AllreduceMode::Auto;
  bool autotune = false;
  std::string autotune_log;  // CSV of every trial; empty: none
  double autotune_sample_seconds = 0.5;
  int autotune_warmup_samples = 1;
  bool timeline_mark_cycles = false;
  bool dynamic_process_sets = false;  // read by the front end's process-set registry
  // RING_PAIR_BLOCK_BYTES, RING_SHM_RING_BYTES, RING_STREAMING_STORES: what
  // the user set of the sizes common/cache_tuning.h chooses (unset: auto).
  CacheTuningOverrides cache_overrides;
  bool fast_path = true;  // RING_FAST_PATH (engine/fast_path.h)
  bool encrypt = false;  // RING_ENCRYPT: TCP links are encrypted (transport/aead_channel.h)
  // RING_GPU_OPERATIONS=host: GPU tensors always take the host-staged path
  // (backends/gpu/host_staged.h), never NCCL (backends/gpu/nccl_backend.h).
  bool gpu_host_staged = false;
  int nccl_streams = 1;  // RING_NUM_NCCL_STREAMS: engine streams per GPU for NCCL
  bool async_completion = false;  // RING_ENABLE_ASYNC_COMPLETION (backends/gpu/nccl_backend.h)

  // Returns the value of a variable, or null when it is not set.
  using Getter = std::function<const char*(const char*)>;

  // Reads the process environment.
  static Config from_env();
  // Reads the variables `get` returns instead (for the binding's
  // parse_config and for tests); from_env is from(getenv).
  static Config from(const Getter& get);
};

// RING_TIMELINE / HOROVOD_TIMELINE set to this: no timeline now; the front
// end may call start_timeline() later.
constexpr const char* kTimelineDynamic = "DYNAMIC";

struct ConfigEntry {
  const char* name;     // RING_...
  const char* alias;    // HOROVOD_... or ""
  const char* default_value;
  const char* doc;
};

// The table, for documentation and `ringrun --check-build`.
const std::vector<ConfigEntry>& config_table();

}  // namespace ring
