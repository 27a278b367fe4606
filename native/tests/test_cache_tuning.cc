// common/cache_tuning.h: cache sizes (and overrides) -> the chosen sizes,
// the engine's RING_ settings for them, and what this machine reports.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "collectives/collectives.h"
#include "common/cache_tuning.h"
#include "common/error.h"
#include "engine/config.h"
#include "tests/fixture.h"
#include "tests/harness.h"

using ring::CacheSizes;
using ring::CacheTuning;
using ring::CacheTuningOverrides;
using ring::choose_cache_tuning;

namespace {

constexpr size_t kKiB = size_t(1) << 10;
constexpr size_t kMiB = size_t(1) << 20;

CacheSizes caches(size_t l1d, size_t l2, size_t l3) {
  CacheSizes c;
  c.l1d = l1d;
  c.l2 = l2;
  c.l3 = l3;
  return c;
}

ring::Config config(std::initializer_list<std::pair<const char*, const char*>> env) {
  return ring::Config::from([&](const char* name) -> const char* {
    for (const auto& [k, v] : env)
      if (std::string(k) == name) return v;
    return nullptr;
  });
}

}  // namespace

TEST(cache_tuning_unknown_caches_keep_the_old_constants) {
  const CacheTuning t = choose_cache_tuning(CacheSizes{});
  CHECK_EQ(t.pair_block_bytes, 256 * kKiB);
  CHECK_EQ(t.shm_ring_bytes, 1 * kMiB);
  CHECK_EQ(t.stream_min_bytes, SIZE_MAX);
}

TEST(cache_tuning_from_the_machines_measured) {
  // The 2-core Intel Xeon VM: 48 KiB L1d, 2 MiB L2, 480 MiB L3.
  const CacheTuning intel = choose_cache_tuning(caches(48 * kKiB, 2 * kMiB, 480 * kMiB));
  CHECK_EQ(intel.pair_block_bytes, 256 * kKiB);
  CHECK_EQ(intel.shm_ring_bytes, 1 * kMiB);
  CHECK_EQ(intel.stream_min_bytes, 1920 * kMiB);
  // AMD EPYC (Zen): 32 KiB L1d, 512 KiB L2, 32 MiB L3.
  const CacheTuning amd = choose_cache_tuning(caches(32 * kKiB, 512 * kKiB, 32 * kMiB));
  CHECK_EQ(amd.pair_block_bytes, 256 * kKiB);
  CHECK_EQ(amd.shm_ring_bytes, 1 * kMiB);
  CHECK_EQ(amd.stream_min_bytes, 128 * kMiB);
}

TEST(cache_tuning_small_and_odd_caches) {
  // 256 KiB L2 (older Intel cores): half-size blocks, 512 KiB rings.
  const CacheTuning skl = choose_cache_tuning(caches(32 * kKiB, 256 * kKiB, 8 * kMiB));
  CHECK_EQ(skl.pair_block_bytes, 128 * kKiB);
  CHECK_EQ(skl.shm_ring_bytes, 512 * kKiB);
  CHECK_EQ(skl.stream_min_bytes, 32 * kMiB);
  // Tiny or odd sizes round down to powers of two within the bounds.
  const CacheTuning tiny = choose_cache_tuning(caches(16 * kKiB, 64 * kKiB, 0));
  CHECK_EQ(tiny.pair_block_bytes, 64 * kKiB);
  CHECK_EQ(tiny.shm_ring_bytes, 256 * kKiB);
  CHECK_EQ(tiny.stream_min_bytes, SIZE_MAX);
  const CacheTuning odd = choose_cache_tuning(caches(48 * kKiB, 1280 * kKiB, 0));
  CHECK_EQ(odd.pair_block_bytes, 256 * kKiB);
  CHECK_EQ(odd.shm_ring_bytes, 1 * kMiB);
}

TEST(cache_tuning_overrides_win) {
  CacheTuningOverrides o;
  o.pair_block_bytes = 64 * kKiB;
  o.shm_ring_bytes = 4 * kMiB;
  o.streaming_stores = true;
  const CacheTuning on = choose_cache_tuning(caches(48 * kKiB, 2 * kMiB, 480 * kMiB), o);
  CHECK_EQ(on.pair_block_bytes, 64 * kKiB);
  CHECK_EQ(on.shm_ring_bytes, 4 * kMiB);
  CHECK_EQ(on.stream_min_bytes, size_t(0));
  o.streaming_stores = false;
  CHECK_EQ(choose_cache_tuning(caches(0, 0, 1 * kMiB), o).stream_min_bytes, SIZE_MAX);
}

TEST(cache_tuning_settings_read_from_the_environment) {
  const ring::Config unset = config({});
  CHECK(!unset.cache_overrides.pair_block_bytes && !unset.cache_overrides.shm_ring_bytes &&
        !unset.cache_overrides.streaming_stores);
  const ring::Config autos = config(
      {{"RING_PAIR_BLOCK_BYTES", "auto"}, {"RING_SHM_RING_BYTES", "AUTO"}, {"RING_STREAMING_STORES", "auto"}});
  CHECK(!autos.cache_overrides.pair_block_bytes && !autos.cache_overrides.shm_ring_bytes &&
        !autos.cache_overrides.streaming_stores);
  const ring::Config set = config(
      {{"RING_PAIR_BLOCK_BYTES", "131072"}, {"RING_SHM_RING_BYTES", "65600"}, {"RING_STREAMING_STORES", "0"}});
  CHECK_EQ(*set.cache_overrides.pair_block_bytes, 128 * kKiB);
  CHECK_EQ(*set.cache_overrides.shm_ring_bytes, size_t(65600) & ~size_t(63));
  CHECK(!*set.cache_overrides.streaming_stores);
  CHECK_THROWS_KIND(config({{"RING_PAIR_BLOCK_BYTES", "4095"}}), ring::ErrorKind::BadArgument);
  CHECK_THROWS_KIND(config({{"RING_SHM_RING_BYTES", "1M"}}), ring::ErrorKind::BadArgument);
  CHECK_THROWS_KIND(config({{"RING_STREAMING_STORES", "sometimes"}}), ring::ErrorKind::BadArgument);
}

TEST(cache_tuning_reads_this_machine_and_describes_it) {
  const CacheSizes here = ring::read_cache_sizes();  // whatever it is, never throws
  const std::string line = ring::describe_cache_tuning(here, choose_cache_tuning(here));
  CHECK(line.find("caches L1d ") == 0);
  CHECK(line.find("pair block ") != std::string::npos);
  const std::string known = ring::describe_cache_tuning(caches(48 * kKiB, 2 * kMiB, 480 * kMiB),
                                                        choose_cache_tuning(caches(48 * kKiB, 2 * kMiB, 480 * kMiB)));
  CHECK_EQ(known, std::string("caches L1d 48 KiB, L2 2 MiB, L3 480 MiB; pair block 256 KiB, shm ring 1 MiB, "
                              "streaming stores from 1920 MiB"));
}

namespace {

// The two-rank allreduce of `count` random floats (own + peer, the ring's
// order), in place and out of place with a factor, under `t`.
std::vector<std::vector<float>> pair_results(const CacheTuning& t, size_t count) {
  const CacheTuning before = ring::cache_tuning();
  ring::set_cache_tuning(t);
  std::vector<std::vector<float>> out(4);
  const std::vector<size_t> chunks = {count / 2, count - count / 2};
  ring_test::run_ranks(2, [&](ring::Mesh& m) {
    std::vector<float> in(count);
    for (size_t i = 0; i < count; ++i) in[i] = float((i * 2654435761u + m.rank() * 40503u) % 100003) * 1.37e-3f;
    std::vector<float> buf = in, dst(count);
    ring::ring_allreduce(m, buf.data(), chunks, ring::DataType::Float32, ring::ReduceOp::Sum);
    ring::ring_allreduce(m, in.data(), dst.data(), chunks, ring::DataType::Float32, ring::ReduceOp::Sum, 0.37);
    out[m.rank()] = std::move(buf);
    out[2 + m.rank()] = std::move(dst);
  });
  ring::set_cache_tuning(before);
  return out;
}

}  // namespace

TEST(cache_tuning_changes_no_result_bit) {
  // Over 1 MiB: the two-rank block allreduce (allreduce_pair.cc).
  const size_t count = (size_t(1) << 18) + 13;
  const auto reference = pair_results(CacheTuning{}, count);
  CHECK(std::memcmp(reference[0].data(), reference[1].data(), count * 4) == 0);
  CHECK(std::memcmp(reference[2].data(), reference[3].data(), count * 4) == 0);
  for (size_t block : {size_t(4096), 64 * kKiB, 256 * kKiB, 1 * kMiB})
    for (size_t stream_min : {size_t(0), SIZE_MAX}) {
      CacheTuning t;
      t.pair_block_bytes = block;
      t.stream_min_bytes = stream_min;
      const auto got = pair_results(t, count);
      for (int i = 0; i < 4; ++i) CHECK(std::memcmp(got[i].data(), reference[i].data(), count * 4) == 0);
    }
}
