// The sizes of the large-message paths, chosen from the machine's caches:
// the one place where ring decides a block, a ring or a store kind by what
// the CPU it runs on reports, instead of by constants tuned on one CPU.
//
//   read_cache_sizes()      what this machine reports (sysconf, else sysfs)
//   choose_cache_tuning()   cache sizes (and the user's overrides) -> sizes,
//                           a pure function: the unit tests feed it caches
//   set_cache_tuning() /    the process-wide choice the collectives read
//   cache_tuning()          (the engine sets it once, before any transfer)
//
// Nothing chosen here changes a result: the two-rank allreduce reduces
// every element as own (op) peer whatever its block, a ring's size only
// splits a transfer into pieces, and streaming stores write the same
// bytes. Results are bitwise the same under every choice.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace ring {

// Bytes of one instance of each data cache level; 0 where the machine
// does not say. l3_sharing_cpus: how many of this machine's CPUs share
// that L3 (0: unknown); a VM lists only its own.
struct CacheSizes {
  size_t l1d = 0;
  size_t l2 = 0;
  size_t l3 = 0;
  int l3_sharing_cpus = 0;
};

// sysconf(_SC_LEVEL1_DCACHE_SIZE, ...) where the C library answers, else
// /sys/devices/system/cpu/cpu0/cache/index*/{level,type,size}; 0 for a
// level neither knows. Never throws.
CacheSizes read_cache_sizes();

// What the large-message paths use.
struct CacheTuning {
  // allreduce_pair.cc: both halves advance in blocks of this many bytes;
  // a block of the input, the peer's block and the result block are in
  // flight at once, and should stay in this core's L2.
  size_t pair_block_bytes = 256u << 10;
  // Each shared-memory ring between two ranks (transport/shm_channel.h):
  // the bytes a writer may run ahead of its reader; the ring is written by
  // one core and read by the other, so it should stay in cache.
  size_t shm_ring_bytes = 1u << 20;
  // The two-rank allreduce writes the peer's half of a buffer of at least
  // this many bytes with streaming (non-temporal) stores; SIZE_MAX: never.
  // Streaming pays only for results far larger than the last-level cache.
  size_t stream_min_bytes = SIZE_MAX;
};

// The user's settings (RING_PAIR_BLOCK_BYTES, RING_SHM_RING_BYTES,
// RING_STREAMING_STORES); unset fields are chosen from the caches.
struct CacheTuningOverrides {
  std::optional<size_t> pair_block_bytes;
  std::optional<size_t> shm_ring_bytes;
  std::optional<bool> streaming_stores;  // true: every size; false: never
};

// The rule, from the caches, for whatever of it the overrides leave open:
//   pair block   L2 / 2, rounded down to a power of two, 64 KiB to 256 KiB
//                (unknown L2: 256 KiB). Blocks larger than 256 KiB were
//                slower with an L2 of 2 MiB (1 MiB blocks: 58-60% of the
//                memory limit at 64 MiB against 67-68%; 128 KiB level
//                with 256 KiB), and 256 KiB was the best with 512 KiB;
//   shm ring     2 x L2, a power of two from 256 KiB to 1 MiB (unknown
//                L2: 1 MiB): 4 MiB rings were slower with an L2 of 2 MiB
//                (57-60% at 64 MiB), as they were with 512 KiB;
//   streaming    buffers of at least 4 x L3 (unknown L3: never): plain
//                stores were faster at 64 MiB with an L3 of 32 MiB and of
//                480 MiB (docs/performance.md, Streaming stores).
CacheTuning choose_cache_tuning(const CacheSizes& caches, const CacheTuningOverrides& overrides = {});

void set_cache_tuning(const CacheTuning& tuning);
// The choice last set (the defaults of CacheTuning before any).
CacheTuning cache_tuning();

// One line for the debug log: "caches L1d 48 KiB, L2 2 MiB, L3 480 MiB
// (2 CPUs); pair block 256 KiB, shm ring 1 MiB, streaming stores from 1920 MiB".
std::string describe_cache_tuning(const CacheSizes& caches, const CacheTuning& tuning);

}  // namespace ring
