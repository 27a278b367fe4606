// How the GPU fusion buffer grows (gpu/device_memory.h) and lays out its
// entries (gpu/batched_copy.h): pure, no driver needed.
#include "gpu/batched_copy.h"
#include "gpu/device_memory.h"
#include "gpu/device_pool.h"
#include "tests/harness.h"

using namespace ring::gpu;

TEST(fusion_buffer_grows_in_whole_mebibytes_and_by_half_at_least) {
  constexpr size_t MiB = size_t(1) << 20;
  CHECK(fusion_capacity(1, 0) == MiB);
  CHECK(fusion_capacity(MiB, 0) == MiB);
  CHECK(fusion_capacity(MiB + 1, MiB) == 2 * MiB);   // 1.5 MiB, rounded up
  CHECK(fusion_capacity(3 * MiB, 2 * MiB) == 3 * MiB);
  CHECK(fusion_capacity(5 * MiB, 2 * MiB) == 5 * MiB);  // what is needed beats 1.5 x
  CHECK(fusion_capacity(64 * MiB + 3, 64 * MiB) == 96 * MiB);
}

TEST(fusion_entries_start_at_16_byte_boundaries) {
  CHECK(fusion_padded(0) == 0);
  CHECK(fusion_padded(6) == 16);  // three fp16 elements
  CHECK(fusion_padded(16) == 16);
  CHECK(fusion_padded(2002) == 2016);
  for (size_t esize : {1, 2, 4, 8}) CHECK(kFusionAlign % esize == 0);  // padding is whole elements
}

TEST(pooled_results_come_in_powers_of_two_then_whole_mebibytes) {
  constexpr size_t MiB = size_t(1) << 20;
  CHECK(pool_class(0) == 4096 && pool_class(1) == 4096 && pool_class(4096) == 4096);
  CHECK(pool_class(4097) == 8192);
  CHECK(pool_class(MiB) == MiB);
  CHECK(pool_class(MiB + 1) == 2 * MiB);
  CHECK(pool_class(5 * MiB - 3) == 5 * MiB);
}
