// What the GPU backends decide from a request alone (engine/backends/gpu/nccl_reduction.h),
// how fusion copies are batched into launches, and the NCCL version text: no GPU, driver or NCCL needed.
#include <cmath>

#include "engine/backends/gpu/gpu_wait.h"
#include "engine/backends/gpu/nccl_hierarchical.h"
#include "engine/backends/gpu/nccl_reduction.h"
#include "engine/field_value.h"
#include "gpu/batched_copy.h"
#include "gpu/nccl.h"
#include "tests/harness.h"

using namespace ring;
using namespace ring::gpu;

namespace {

Request reduction(DataType dtype, ReduceOp op, double pre = 1.0, double post = 1.0) {
  Request q;
  q.dtype = dtype;
  q.reduce_op = op;
  q.prescale = pre;
  q.postscale = post;
  q.shape = {4};
  return q;
}

}  // namespace

TEST(nccl_reduction_folds_scaling_into_one_reduction) {
  auto sum = nccl_reduction(reduction(DataType::Float32, ReduceOp::Sum), 4);
  CHECK(sum && sum->op == ncclSum && !sum->premul);
  auto avg = nccl_reduction(reduction(DataType::BFloat16, ReduceOp::Average), 4);
  CHECK(avg && avg->op == ncclAvg && !avg->premul);
  auto scaled = nccl_reduction(reduction(DataType::Float16, ReduceOp::Average, 0.5, 3.0), 4);
  CHECK(scaled && scaled->premul);
  CHECK(std::fabs(scaled->factor - 0.375) < 1e-15);
  auto pre = nccl_reduction(reduction(DataType::Float64, ReduceOp::Sum, 2.0), 8);
  CHECK(pre && pre->premul && pre->factor == 2.0);
  auto mx = nccl_reduction(reduction(DataType::Int32, ReduceOp::Max), 2);
  CHECK(mx && mx->op == ncclMax);
}

TEST(nccl_reduction_leaves_what_it_cannot_do_to_the_host_path) {
  CHECK(!nccl_reduction(reduction(DataType::Int32, ReduceOp::Average), 2));   // integer average
  CHECK(!nccl_reduction(reduction(DataType::Int64, ReduceOp::Sum, 2.0), 2));  // scaled integers
  CHECK(!nccl_reduction(reduction(DataType::Float32, ReduceOp::Max, 2.0), 2));  // scaled max
  CHECK(!nccl_reduction(reduction(DataType::Int16, ReduceOp::Sum), 2));       // no NCCL type
  CHECK(!nccl_reduction(reduction(DataType::Bool, ReduceOp::Max), 2));
  CHECK(!nccl_reduction(reduction(DataType::Float32, ReduceOp::Adasum), 2));
  Response r;
  r.op = OpType::Allgather;
  CHECK(runs_on_nccl(r, reduction(DataType::Bool, ReduceOp::Sum), 2));  // data movement: any dtype
  r.op = OpType::Reducescatter;
  CHECK(!runs_on_nccl(r, reduction(DataType::Int16, ReduceOp::Sum), 2));
}

TEST(hierarchical_reduction_scales_inside_the_host_and_sums_across) {
  auto avg = hierarchical_reduction(*nccl_reduction(reduction(DataType::Float32, ReduceOp::Average), 8), 8);
  CHECK(avg.local.premul && avg.local.op == ncclSum && avg.local.factor == 0.125 && avg.cross == ReduceOp::Sum);
  auto scaled = hierarchical_reduction(*nccl_reduction(reduction(DataType::Float32, ReduceOp::Average, 0.5, 3.0), 4), 4);
  CHECK(scaled.local.premul && scaled.local.factor == 0.375 && scaled.cross == ReduceOp::Sum);
  auto mx = hierarchical_reduction(*nccl_reduction(reduction(DataType::Int32, ReduceOp::Max), 4), 4);
  CHECK(!mx.local.premul && mx.local.op == ncclMax && mx.cross == ReduceOp::Max);
  auto prod = hierarchical_reduction(*nccl_reduction(reduction(DataType::Float64, ReduceOp::Product), 4), 4);
  CHECK(prod.local.op == ncclProd && prod.cross == ReduceOp::Product);
}

TEST(hierarchical_shards_are_equal_and_cover_the_buffer) {
  CHECK(hierarchical_elements(0, 4) == 0);
  CHECK(hierarchical_elements(8, 4) == 8);
  CHECK(hierarchical_elements(9, 4) == 12);
  CHECK(hierarchical_elements(1, 8) == 8);
  CHECK(hierarchical_elements(7, 1) == 7);
}

TEST(nccl_errors_of_a_lost_peer_are_peer_failures) {
  CHECK(nccl_error_kind(6) == ErrorKind::PeerFailure);  // ncclRemoteError
  CHECK(nccl_error_kind(2) == ErrorKind::PeerFailure);  // ncclSystemError
  CHECK(nccl_error_kind(3) == ErrorKind::Internal);     // ncclInternalError
  CHECK(nccl_error_kind(5) == ErrorKind::Internal);     // ncclInvalidUsage
}

TEST(nccl_version_text_reads_both_encodings) {
  CHECK_EQ(nccl_version_text(22703), std::string("2.27.3"));
  CHECK_EQ(nccl_version_text(21200), std::string("2.12.0"));
  CHECK_EQ(nccl_version_text(2708), std::string("2.7.8"));
}

TEST(ranks_agree_on_the_device_type_not_its_index) {
  CHECK(same_value(Device{DeviceType::CUDA, 0}, Device{DeviceType::CUDA, 3}));
  CHECK(!same_value(Device{DeviceType::CUDA, 0}, Device{DeviceType::CPU, 0}));
}

TEST(batched_copies_fill_launches_in_order_and_leave_large_ones_to_memcpy) {
  std::vector<CopyJob> jobs;
  for (unsigned i = 0; i < 150; ++i) jobs.push_back({1000 + i, 5000 + i, i % 7 == 0 ? 0 : 16 * 1024});
  jobs.push_back({1, 2, kBatchedCopyMaxBytes});  // large: one cuMemcpyAsync
  jobs.push_back({3, 4, 5});
  std::vector<CopyJob> large;
  std::vector<CopyLaunch> launches = plan_copies(jobs, &large);
  CHECK(large.size() == 1 && large[0].dst == 1 && large[0].bytes == kBatchedCopyMaxBytes);
  // 150 jobs, 22 of them empty, plus the 5-byte one: 129 copies, in launches of 64.
  CHECK(launches.size() == 3);
  CHECK(launches[0].args.count == 64 && launches[1].args.count == 64 && launches[2].args.count == 1);
  CHECK(launches[0].args.dst[0] == 1001 && launches[0].args.src[0] == 5001);
  CHECK(launches[2].args.dst[0] == 3 && launches[2].args.bytes[0] == 5);
  size_t copied = 0;
  for (const CopyLaunch& l : launches)
    for (uint32_t i = 0; i < l.args.count; ++i) copied += l.args.bytes[i];
  CHECK(copied == 128 * 16 * 1024 + 5);
  // A block moves 256 threads x 16 bytes x 4 = 16 KiB; at most 32 blocks per copy.
  CHECK(launches[0].blocks_per_copy == 1 && launches[2].blocks_per_copy == 1);
  std::vector<CopyJob> big(1, CopyJob{1, 2, kBatchedCopyMaxBytes - 1});
  CHECK(plan_copies(big, &large)[0].blocks_per_copy == 32);
}
