#include "engine/config.h"

#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>

#include "common/error.h"
#include "engine/config_value.h"

namespace ring {
namespace {

const std::vector<ConfigEntry> kTable = {
    {"RING_FUSION_THRESHOLD", "HOROVOD_FUSION_THRESHOLD", "67108864",
     "bytes: allreduces are fused into one buffer up to this size"},
    {"RING_CYCLE_TIME", "HOROVOD_CYCLE_TIME", "1", "milliseconds: longest time rank 0 gathers a batch of tensors while they are still arriving"},
    {"RING_CACHE_CAPACITY", "HOROVOD_CACHE_CAPACITY", "1024", "tensor names kept in the response cache"},
    {"RING_TIMEOUT_SECONDS", "HOROVOD_GLOO_TIMEOUT_SECONDS", "30",
     "seconds without progress in a transfer before it fails"},
    {"RING_TRANSPORT", "", "shm", "shm: shared memory between ranks on one host, TCP across hosts; tcp: TCP only"},
    {"RING_SHM_RING_BYTES", "", "auto",
     "bytes of each shared-memory ring between two ranks, at least 4096; auto: from the L2 cache's size "
     "(common/cache_tuning.h)"},
    {"RING_PAIR_BLOCK_BYTES", "", "auto",
     "bytes of each block of the two-rank allreduce of large buffers, at least 4096; auto: from the L2 "
     "cache's size (common/cache_tuning.h)"},
    {"RING_LOG_LEVEL", "HOROVOD_LOG_LEVEL", "warning", "trace, debug, info, warning or error"},
    {"RING_TIMELINE", "HOROVOD_TIMELINE", "",
     "path: rank 0 writes a Chrome trace of every tensor's phases there; DYNAMIC: no file until start_timeline()"},
    {"RING_TIMELINE_MARK_CYCLES", "HOROVOD_TIMELINE_MARK_CYCLES", "0", "1: mark every cycle of the engine in the timeline"},
    {"RING_HIERARCHICAL_ALLREDUCE", "HOROVOD_HIERARCHICAL_ALLREDUCE", "auto",
     "1: reduce within each host, then across hosts, then share within each host; 0: one flat ring; auto: "
     "hierarchical when there are several hosts with several ranks each"},
    {"RING_ALLREDUCE_ALGORITHM", "", "auto",
     "auto: within one host the ring (two ranks: recursive doubling under 16 KiB); across hosts, with a "
     "power-of-two number of ranks, recursive doubling under 64 KiB and halving-doubling above; the ring "
     "otherwise; ring: always the ring; tree: recursive doubling or halving-doubling by size; doubling or "
     "halving-doubling: that algorithm at every size (tree, doubling and halving-doubling need a "
     "power-of-two number of ranks, else the ring runs; docs/scaling.md)"},
    {"RING_STREAMING_STORES", "", "auto",
     "1: the two-rank allreduce over shared memory writes the peer's half of the result with streaming "
     "(non-temporal) stores, which bypass the cache: faster where memory bandwidth limits it, slower where "
     "the cache is large (docs/performance.md); 0: never; auto: for buffers of at least 4 times the L3 "
     "cache (common/cache_tuning.h)"},
    {"RING_FAST_PATH", "", "1",
     "1: a small allreduce the ranks already agreed on (a response-cache hit) skips rank 0: the ranks exchange "
     "it directly, one trip instead of three (docs/performance.md); 0: every allreduce is negotiated through "
     "rank 0; the same on every rank"},
    {"RING_AUTOTUNE", "HOROVOD_AUTOTUNE", "0", "1: tune the fusion threshold and cycle time online, then settle"},
    {"RING_AUTOTUNE_LOG", "HOROVOD_AUTOTUNE_LOG", "", "path: rank 0 writes every autotune trial there (CSV)"},
    {"RING_AUTOTUNE_SAMPLE_SECONDS", "", "0.5", "seconds of work each autotune sample measures"},
    {"RING_AUTOTUNE_WARMUP_SAMPLES", "HOROVOD_AUTOTUNE_WARMUP_SAMPLES", "1",
     "samples discarded after each change of the autotuned settings"},
    {"RING_STALL_CHECK_TIME_SECONDS", "HOROVOD_STALL_CHECK_TIME_SECONDS", "60",
     "seconds: rank 0 warns about tensors that some ranks have not submitted (0: never)"},
    {"RING_STALL_SHUTDOWN_TIME_SECONDS", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "0",
     "seconds: such a stall fails the job on every rank (0: never)"},
    {"RING_STALL_CHECK_DISABLE", "HOROVOD_STALL_CHECK_DISABLE", "0",
     "1: no stall check: neither the warning nor the shutdown, whatever the two times above say"},
    {"RING_ENCRYPT", "", "0",
     "1: encrypt and authenticate TCP traffic between ranks (AES-256-GCM, keys from the job secret; needs "
     "libcrypto); shared memory within a host is not encrypted"},
    {"RING_GPU_OPERATIONS", "HOROVOD_GPU_OPERATIONS", "nccl",
     "how collectives on GPU tensors run: nccl (NCCL on the engine's streams, when every rank of the process "
     "set has NCCL; host-staged otherwise) or host (copied to host memory, reduced by the CPU ring, copied back)"},
    {"RING_NUM_NCCL_STREAMS", "HOROVOD_NUM_NCCL_STREAMS", "1",
     "CUDA streams (each with its own NCCL communicator and fusion buffer) per GPU that the engine's NCCL "
     "operations take turns on, 1 to 16"},
    {"RING_ENABLE_ASYNC_COMPLETION", "HOROVOD_ENABLE_ASYNC_COMPLETION", "0",
     "1: a GPU operation run on NCCL completes once its work is queued, and the stream the caller passed "
     "waits for it instead of the host"},
    {"RING_DYNAMIC_PROCESS_SETS", "HOROVOD_DYNAMIC_PROCESS_SETS", "0",
     "1: process sets may be added and removed after init() (collectively, by every rank)"},
};

// What the user set for one entry: the first of its name and alias that is
// set and non-empty (`name` null when neither is).
struct Setting {
  const char* name = nullptr;
  const char* value = nullptr;
  explicit operator bool() const { return name != nullptr; }
};

Setting lookup(const Config::Getter& get, const ConfigEntry& e) {
  for (const char* n : {e.name, e.alias}) {
    if (!*n) continue;
    const char* v = get(n);
    if (v && *v) return Setting{n, v};
  }
  return Setting{};
}

// Errors name the variable the user set, RING_ or HOROVOD_.
[[noreturn]] void bad(const Setting& s, const std::string& what, const char* note = nullptr) {
  std::string msg = std::string(s.name) + " should be " + what + ". Got: '" + s.value + "'";
  if (note) msg += std::string(" (") + note + ")";
  throw_error(ErrorKind::BadArgument, msg);
}

const ConfigEntry& entry(const char* name) {
  for (const auto& e : kTable)
    if (std::strcmp(e.name, name) == 0) return e;
  throw_error(ErrorKind::Internal, std::string("no config entry ") + name);
}

// Reads the entries of the table through one getter, each by its kind.
class Reader {
 public:
  explicit Reader(const Config::Getter& get) : get_(get) {}

  Setting find(const char* name) const { return lookup(get_, entry(name)); }

  bool flag(const char* name, bool dflt) const {
    const Setting s = find(name);
    if (!s) return dflt;
    const auto v = parse_bool(s.value);
    if (!v) bad(s, "0 or 1", kBoolSpellings);
    return *v;
  }

  int64_t integer(const char* name, const char* what, int64_t min, int64_t dflt,
                  int64_t max = std::numeric_limits<int64_t>::max()) const {
    const Setting s = find(name);
    if (!s) return dflt;
    const auto v = parse_integer(s.value);
    if (!v || *v < min || *v > max) bad(s, what);
    return *v;
  }

  double number(const char* name, const char* what, double min, double dflt) const {
    const Setting s = find(name);
    if (!s) return dflt;
    const auto v = parse_number(s.value);
    if (!v || !(*v >= min)) bad(s, what);
    return *v;
  }

 private:
  const Config::Getter& get_;
};

// 1 on, 0 off, -1 auto.
int read_hierarchical(const Reader& r, int dflt) {
  const Setting s = r.find("RING_HIERARCHICAL_ALLREDUCE");
  if (!s) return dflt;
  if (parse_word(s.value, {"auto"})) return -1;
  const auto on = parse_bool(s.value);
  if (!on) bad(s, "0, 1 or auto", kBoolSpellings);
  return *on ? 1 : 0;
}

LogLevel read_log_level(const Reader& r, LogLevel dflt) {
  const Setting s = r.find("RING_LOG_LEVEL");
  if (!s) return dflt;
  // warn and fatal are other names of warning and error.
  const auto i = parse_word(s.value, {"trace", "debug", "info", "warning", "error", "warn", "fatal"});
  if (!i) bad(s, "one of trace, debug, info, warning, error");
  static const LogLevel levels[] = {LogLevel::Trace, LogLevel::Debug, LogLevel::Info, LogLevel::Warning,
                                    LogLevel::Error, LogLevel::Warning, LogLevel::Error};
  return levels[*i];
}

// An integer of bytes (at least 4096, rounded down to whole cache lines)
// or auto (unset).
std::optional<size_t> read_auto_bytes(const Reader& r, const char* name) {
  const Setting s = r.find(name);
  if (!s || parse_word(s.value, {"auto"})) return std::nullopt;
  const auto v = parse_integer(s.value);
  if (!v || *v < 4096) bad(s, "auto or an integer number of bytes of at least 4096");
  return static_cast<size_t>(*v) & ~size_t(63);
}

CacheTuningOverrides read_cache_overrides(const Reader& r) {
  CacheTuningOverrides o;
  o.shm_ring_bytes = read_auto_bytes(r, "RING_SHM_RING_BYTES");
  o.pair_block_bytes = read_auto_bytes(r, "RING_PAIR_BLOCK_BYTES");
  if (const Setting s = r.find("RING_STREAMING_STORES"); s && !parse_word(s.value, {"auto"})) {
    const auto v = parse_bool(s.value);
    if (!v) bad(s, "0, 1 or auto", kBoolSpellings);
    o.streaming_stores = *v;
  }
  return o;
}

}  // namespace

const std::vector<ConfigEntry>& config_table() { return kTable; }

Config Config::from_env() {
  return from([](const char* name) -> const char* { return std::getenv(name); });
}

Config Config::from(const Getter& get) {
  Config c;
  const Reader r(get);
  c.fusion_threshold_bytes = static_cast<size_t>(r.integer(
      "RING_FUSION_THRESHOLD", "a non-negative integer number of bytes", 0, int64_t(c.fusion_threshold_bytes)));
  c.cycle_time_ms = r.number("RING_CYCLE_TIME", "a non-negative number of milliseconds", 0, c.cycle_time_ms);
  c.cache_capacity =
      static_cast<size_t>(r.integer("RING_CACHE_CAPACITY", "a non-negative integer", 0, int64_t(c.cache_capacity)));
  c.timeout_seconds = r.number("RING_TIMEOUT_SECONDS", "a positive number of seconds", 0.001, c.timeout_seconds);
  c.cache_overrides = read_cache_overrides(r);
  c.stall_check_seconds =
      r.number("RING_STALL_CHECK_TIME_SECONDS", "a non-negative number of seconds", 0, c.stall_check_seconds);
  c.stall_shutdown_seconds =
      r.number("RING_STALL_SHUTDOWN_TIME_SECONDS", "a non-negative number of seconds", 0, c.stall_shutdown_seconds);
  if (r.flag("RING_STALL_CHECK_DISABLE", false)) c.stall_check_seconds = c.stall_shutdown_seconds = 0;
  if (const Setting s = r.find("RING_TIMELINE")) c.timeline_path = std::strcmp(s.value, kTimelineDynamic) ? s.value : "";
  c.hierarchical_allreduce = read_hierarchical(r, c.hierarchical_allreduce);
  c.autotune = r.flag("RING_AUTOTUNE", c.autotune);
  if (const Setting s = r.find("RING_AUTOTUNE_LOG")) c.autotune_log = s.value;
  c.autotune_sample_seconds =
      r.number("RING_AUTOTUNE_SAMPLE_SECONDS", "a positive number of seconds", 0.001, c.autotune_sample_seconds);
  c.autotune_warmup_samples = static_cast<int>(r.integer("RING_AUTOTUNE_WARMUP_SAMPLES",
                                                         "an integer from 0 to 2147483647", 0,
                                                         c.autotune_warmup_samples, INT32_MAX));
  c.timeline_mark_cycles = r.flag("RING_TIMELINE_MARK_CYCLES", c.timeline_mark_cycles);
  c.dynamic_process_sets = r.flag("RING_DYNAMIC_PROCESS_SETS", c.dynamic_process_sets);
  c.encrypt = r.flag("RING_ENCRYPT", c.encrypt);
  c.fast_path = r.flag("RING_FAST_PATH", c.fast_path);
  if (const Setting s = r.find("RING_TRANSPORT")) {
    const auto t = parse_word(s.value, {"shm", "auto", "tcp"});
    if (!t) bad(s, "'shm' or 'tcp'");
    c.force_tcp = *t == 2;
  }
  if (const Setting s = r.find("RING_ALLREDUCE_ALGORITHM")) {
    const char* const* m = kAllreduceModeNames;
    const auto a = parse_word(s.value, {m[0], m[1], m[2], m[3], m[4]});
    if (!a) bad(s, "'auto', 'ring', 'tree', 'doubling' or 'halving-doubling'");
    c.allreduce_mode = static_cast<AllreduceMode>(*a);
  }
  if (const Setting s = r.find("RING_GPU_OPERATIONS")) {
    const auto g = parse_word(s.value, {"nccl", "host"});
    if (!g) bad(s, "'nccl' or 'host'");
    c.gpu_host_staged = *g == 1;
  }
  c.nccl_streams = static_cast<int>(r.integer("RING_NUM_NCCL_STREAMS", "an integer from 1 to 16", 1, c.nccl_streams, 16));
  c.async_completion = r.flag("RING_ENABLE_ASYNC_COMPLETION", c.async_completion);
  c.log_level = read_log_level(r, c.log_level);
  return c;
}

}  // namespace ring
