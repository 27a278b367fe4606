#include "common/cache_tuning.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <string>

namespace ring {
namespace {

constexpr size_t kKiB = size_t(1) << 10;
constexpr size_t kMiB = size_t(1) << 20;

size_t floor_pow2(size_t v) {
  size_t p = 1;
  while (p <= v / 2) p *= 2;
  return v ? p : 0;
}

size_t clamp_pow2(size_t v, size_t lo, size_t hi) { return std::clamp(floor_pow2(v), lo, hi); }

long sysconf_bytes(int name) {
  const long v = sysconf(name);
  return v > 0 ? v : 0;
}

std::string read_word(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  f >> s;
  return s;
}

// "48K", "2048K", "480M" -> bytes; 0 when it is none of these.
size_t parse_sysfs_size(const std::string& s) {
  if (s.empty()) return 0;
  size_t i = 0, v = 0;
  for (; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i) v = v * 10 + size_t(s[i] - '0');
  if (i == s.size()) return v;
  if (s[i] == 'K') return v * kKiB;
  if (s[i] == 'M') return v * kMiB;
  if (s[i] == 'G') return v * kMiB * 1024;
  return 0;
}

// "0-1,4" -> 3.
int count_cpu_list(const std::string& list) {
  int n = 0;
  size_t pos = 0;
  while (pos < list.size()) {
    size_t end = list.find(',', pos);
    if (end == std::string::npos) end = list.size();
    const std::string part = list.substr(pos, end - pos);
    const size_t dash = part.find('-');
    if (dash == std::string::npos) n += 1;
    else n += std::stoi(part.substr(dash + 1)) - std::stoi(part.substr(0, dash)) + 1;
    pos = end + 1;
  }
  return n;
}

// Fills the levels sysconf left at 0 from cpu0's sysfs cache entries.
void read_sysfs(CacheSizes& c) {
  const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index";
  for (int i = 0; i < 8; ++i) {
    const std::string d = dir + std::to_string(i) + "/";
    const std::string level = read_word(d + "level"), type = read_word(d + "type");
    if (level.empty()) break;
    if (type == "Instruction") continue;
    const size_t bytes = parse_sysfs_size(read_word(d + "size"));
    if (level == "1" && !c.l1d) c.l1d = bytes;
    if (level == "2" && !c.l2) c.l2 = bytes;
    if (level == "3") {
      if (!c.l3) c.l3 = bytes;
      try {
        c.l3_sharing_cpus = count_cpu_list(read_word(d + "shared_cpu_list"));
      } catch (...) {
        c.l3_sharing_cpus = 0;
      }
    }
  }
}

std::string bytes_text(size_t b) {
  if (b == SIZE_MAX) return "never";
  if (b && b % kMiB == 0) return std::to_string(b / kMiB) + " MiB";
  if (b && b % kKiB == 0) return std::to_string(b / kKiB) + " KiB";
  return std::to_string(b) + " B";
}

std::atomic<size_t> g_pair_block{CacheTuning{}.pair_block_bytes};
std::atomic<size_t> g_shm_ring{CacheTuning{}.shm_ring_bytes};
std::atomic<size_t> g_stream_min{CacheTuning{}.stream_min_bytes};

}  // namespace

CacheSizes read_cache_sizes() {
  CacheSizes c;
#if defined(_SC_LEVEL1_DCACHE_SIZE)
  c.l1d = sysconf_bytes(_SC_LEVEL1_DCACHE_SIZE);
  c.l2 = sysconf_bytes(_SC_LEVEL2_CACHE_SIZE);
  c.l3 = sysconf_bytes(_SC_LEVEL3_CACHE_SIZE);
#endif
  read_sysfs(c);
  return c;
}

CacheTuning choose_cache_tuning(const CacheSizes& caches, const CacheTuningOverrides& o) {
  CacheTuning t;
  if (caches.l2) t.pair_block_bytes = clamp_pow2(caches.l2 / 2, 64 * kKiB, 256 * kKiB);
  if (caches.l2) t.shm_ring_bytes = clamp_pow2(2 * caches.l2, 256 * kKiB, kMiB);
  if (caches.l3) t.stream_min_bytes = 4 * caches.l3;
  if (o.pair_block_bytes) t.pair_block_bytes = *o.pair_block_bytes;
  if (o.shm_ring_bytes) t.shm_ring_bytes = *o.shm_ring_bytes;
  if (o.streaming_stores) t.stream_min_bytes = *o.streaming_stores ? 0 : SIZE_MAX;
  return t;
}

void set_cache_tuning(const CacheTuning& t) {
  g_pair_block.store(t.pair_block_bytes, std::memory_order_relaxed);
  g_shm_ring.store(t.shm_ring_bytes, std::memory_order_relaxed);
  g_stream_min.store(t.stream_min_bytes, std::memory_order_relaxed);
}

CacheTuning cache_tuning() {
  CacheTuning t;
  t.pair_block_bytes = g_pair_block.load(std::memory_order_relaxed);
  t.shm_ring_bytes = g_shm_ring.load(std::memory_order_relaxed);
  t.stream_min_bytes = g_stream_min.load(std::memory_order_relaxed);
  return t;
}

std::string describe_cache_tuning(const CacheSizes& c, const CacheTuning& t) {
  auto level = [](size_t b) { return b ? bytes_text(b) : std::string("unknown"); };
  std::string s = "caches L1d " + level(c.l1d) + ", L2 " + level(c.l2) + ", L3 " + level(c.l3);
  if (c.l3_sharing_cpus) s += " (" + std::to_string(c.l3_sharing_cpus) + " CPUs)";
  s += "; pair block " + bytes_text(t.pair_block_bytes) + ", shm ring " + bytes_text(t.shm_ring_bytes) +
       ", streaming stores " + (t.stream_min_bytes == SIZE_MAX ? std::string("never")
                                : t.stream_min_bytes == 0     ? std::string("always")
                                                              : "from " + bytes_text(t.stream_min_bytes));
  return s;
}

}  // namespace ring
