#include "engine/config.h"

#include <cstdlib>
#include <cctype>
#include <cstring>

#include "common/error.h"

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
    {"RING_SHM_RING_BYTES", "", "4194304", "bytes of each shared-memory ring between two ranks"},
    {"RING_LOG_LEVEL", "HOROVOD_LOG_LEVEL", "warning", "trace, debug, info, warning or error"},
    {"RING_TIMELINE", "HOROVOD_TIMELINE", "",
     "path: rank 0 writes a Chrome trace of every tensor's phases there; DYNAMIC: no file until start_timeline()"},
    {"RING_TIMELINE_MARK_CYCLES", "HOROVOD_TIMELINE_MARK_CYCLES", "0", "1: mark every cycle of the engine in the timeline"},
    {"RING_HIERARCHICAL_ALLREDUCE", "HOROVOD_HIERARCHICAL_ALLREDUCE", "auto",
     "1: reduce within each host, then across hosts, then share within each host; 0: one flat ring; auto: "
     "hierarchical when there are several hosts with several ranks each"},
    {"RING_AUTOTUNE", "HOROVOD_AUTOTUNE", "0", "1: tune the fusion threshold and cycle time online, then settle"},
    {"RING_AUTOTUNE_LOG", "HOROVOD_AUTOTUNE_LOG", "", "path: rank 0 writes every autotune trial there (CSV)"},
    {"RING_AUTOTUNE_SAMPLE_SECONDS", "", "0.5", "seconds of work each autotune sample measures"},
    {"RING_AUTOTUNE_WARMUP_SAMPLES", "HOROVOD_AUTOTUNE_WARMUP_SAMPLES", "1",
     "samples discarded after each change of the autotuned settings"},
    {"RING_STALL_CHECK_TIME_SECONDS", "HOROVOD_STALL_CHECK_TIME_SECONDS", "60",
     "seconds: rank 0 warns about tensors that some ranks have not submitted (0: never)"},
    {"RING_STALL_SHUTDOWN_TIME_SECONDS", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "0",
     "seconds: such a stall fails the job on every rank (0: never)"},
    {"RING_ENCRYPT", "", "0",
     "1: encrypt and authenticate TCP traffic between ranks (AES-256-GCM, keys from the job secret; needs "
     "libcrypto); shared memory within a host is not encrypted"},
    {"RING_DYNAMIC_PROCESS_SETS", "HOROVOD_DYNAMIC_PROCESS_SETS", "0",
     "1: process sets may be added and removed after init() (collectively, by every rank)"},
};

// The value of the first of name/alias that is set and non-empty, or null.
const char* lookup(const ConfigEntry& e) {
  const char* v = std::getenv(e.name);
  if (v && *v) return v;
  if (*e.alias) {
    v = std::getenv(e.alias);
    if (v && *v) return v;
  }
  return nullptr;
}

[[noreturn]] void bad(const ConfigEntry& e, const char* what, const char* value) {
  throw_error(ErrorKind::BadArgument, std::string(e.name) + " should be " + what + ". Got: '" + value + "'");
}

double parse_number(const ConfigEntry& e, const char* v, const char* what, double min) {
  char* end = nullptr;
  double d = std::strtod(v, &end);
  if (end == v || *end != '\0' || !(d >= min)) bad(e, what, v);
  return d;
}

const ConfigEntry& entry(const char* name) {
  for (const auto& e : kTable)
    if (std::strcmp(e.name, name) == 0) return e;
  throw_error(ErrorKind::Internal, std::string("no config entry ") + name);
}

// A 0/1 variable: `dflt` when unset.
bool flag(const char* name, bool dflt) {
  const ConfigEntry& e = entry(name);
  const char* v = lookup(e);
  if (!v) return dflt;
  std::string s(v);
  if (s == "1" || s == "true") return true;
  if (s != "0" && s != "false") bad(e, "0 or 1", v);
  return false;
}

}  // namespace

const std::vector<ConfigEntry>& config_table() { return kTable; }

Config Config::from_env() {
  Config c;
  auto number = [](const char* name, const char* what, double min, double dflt) {
    const ConfigEntry& e = entry(name);
    const char* v = lookup(e);
    return v ? parse_number(e, v, what, min) : dflt;
  };
  c.fusion_threshold_bytes = static_cast<size_t>(
      number("RING_FUSION_THRESHOLD", "a non-negative integer number of bytes", 0, double(c.fusion_threshold_bytes)));
  c.cycle_time_ms = number("RING_CYCLE_TIME", "a non-negative number of milliseconds", 0, c.cycle_time_ms);
  c.cache_capacity =
      static_cast<size_t>(number("RING_CACHE_CAPACITY", "a non-negative integer", 0, double(c.cache_capacity)));
  c.timeout_seconds = number("RING_TIMEOUT_SECONDS", "a positive number of seconds", 0.001, c.timeout_seconds);
  c.shm_ring_bytes = static_cast<size_t>(
      number("RING_SHM_RING_BYTES", "a number of bytes of at least 4096", 4096, double(c.shm_ring_bytes)));
  c.shm_ring_bytes &= ~size_t(63);
  c.stall_check_seconds =
      number("RING_STALL_CHECK_TIME_SECONDS", "a non-negative number of seconds", 0, c.stall_check_seconds);
  c.stall_shutdown_seconds =
      number("RING_STALL_SHUTDOWN_TIME_SECONDS", "a non-negative number of seconds", 0, c.stall_shutdown_seconds);
  if (const char* v = lookup(entry("RING_TIMELINE"))) c.timeline_path = std::strcmp(v, kTimelineDynamic) ? v : "";
  if (const char* v = lookup(entry("RING_HIERARCHICAL_ALLREDUCE"))) {
    std::string s(v);
    if (s == "1" || s == "true") c.hierarchical_allreduce = 1;
    else if (s == "0" || s == "false") c.hierarchical_allreduce = 0;
    else if (s != "auto") bad(entry("RING_HIERARCHICAL_ALLREDUCE"), "0, 1 or auto", v);
  }
  c.autotune = flag("RING_AUTOTUNE", c.autotune);
  if (const char* v = lookup(entry("RING_AUTOTUNE_LOG"))) c.autotune_log = v;
  c.autotune_sample_seconds = number("RING_AUTOTUNE_SAMPLE_SECONDS", "a positive number of seconds", 0.001,
                                     c.autotune_sample_seconds);
  c.autotune_warmup_samples = static_cast<int>(number("RING_AUTOTUNE_WARMUP_SAMPLES", "a non-negative integer", 0,
                                                      c.autotune_warmup_samples));
  c.timeline_mark_cycles = flag("RING_TIMELINE_MARK_CYCLES", c.timeline_mark_cycles);
  c.dynamic_process_sets = flag("RING_DYNAMIC_PROCESS_SETS", c.dynamic_process_sets);
  c.encrypt = flag("RING_ENCRYPT", c.encrypt);
  if (const char* v = lookup(entry("RING_TRANSPORT"))) {
    std::string t(v);
    if (t == "tcp") c.force_tcp = true;
    else if (t != "shm" && t != "auto") bad(entry("RING_TRANSPORT"), "'shm' or 'tcp'", v);
  }
  if (const char* v = lookup(entry("RING_LOG_LEVEL"))) {
    static const char* levels[] = {"trace", "debug", "info", "warning", "error"};
    std::string s(v);
    for (auto& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if (s == "warn") s = "warning";
    bool found = false;
    for (int i = 0; i < 5; ++i)
      if (s == levels[i]) { c.log_level = static_cast<LogLevel>(i); found = true; }
    if (!found) bad(entry("RING_LOG_LEVEL"), "one of trace, debug, info, warning, error", v);
  }
  return c;
}

}  // namespace ring
