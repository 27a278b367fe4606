// What the engine found of CUDA and NCCL (gpu/cuda_driver.h, gpu/nccl.h),
// for the build queries and `ringrun --check-build`.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "gpu/cuda_driver.h"
#include "gpu/nccl.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

nb::dict gpu_info(const std::vector<std::string>& nccl_wheel_paths) {
  const ring::gpu::CudaDriver& cuda = ring::gpu::cuda_driver();
  const ring::gpu::NcclLibrary& nccl = ring::gpu::nccl_library(nccl_wheel_paths);
  nb::dict d;
  d["cuda_loaded"] = cuda.loaded;
  d["cuda_path"] = cuda.path;
  d["cuda_error"] = cuda.error;
  d["cuda_driver_version"] = cuda.version;
  d["device_count"] = cuda.device_count;
  d["nccl_loaded"] = nccl.loaded;
  d["nccl_path"] = nccl.path;
  d["nccl_source"] = nccl.source;
  d["nccl_error"] = nccl.error;
  d["nccl_version"] = nccl.loaded ? nccl.version : 0;
  d["nccl_version_text"] = nccl.version ? ring::gpu::nccl_version_text(nccl.version) : std::string();
  return d;
}

}  // namespace

// Searches for NCCL once, with the nvidia-nccl wheel paths Python knows
// (build_queries.nccl_wheel_paths), before the engine's first GPU
// operation asks for it. Called with the GIL held.
void search_nccl_once() {
  static bool searched = false;
  if (searched) return;
  searched = true;
  nb::object paths = nb::module_::import_("ring_strategy.build_queries").attr("nccl_wheel_paths")();
  ring::gpu::nccl_library(nb::cast<std::vector<std::string>>(paths));
}

void register_gpu(nb::module_& m) {
  m.def("gpu_info", &gpu_info, "nccl_wheel_paths"_a,
        "What this process found of the CUDA driver and NCCL, as a dict. NCCL is searched for on the first "
        "call (nccl_wheel_paths: where an nvidia-nccl wheel would hold libnccl.so.2); later calls report "
        "the same libraries.");
  m.attr("MIN_NCCL_VERSION") = ring::gpu::kMinNcclVersion;
}
