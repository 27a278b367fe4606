// What the engine found of CUDA and NCCL (gpu/cuda_driver.h, gpu/nccl.h),
// for the build queries and `ringrun --check-build`.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "frameworks/engine_calls.h"
#include "frameworks/xla/collective_call.h"
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

// (address, bytes, dtype code, dims): one array of xla_stream_call.
using RawArray = std::tuple<uintptr_t, size_t, int32_t, std::vector<int64_t>>;

std::vector<ring::xla_call::Array> arrays_of(const std::vector<RawArray>& raw) {
  std::vector<ring::xla_call::Array> out;
  for (const auto& [address, bytes, dtype, dims] : raw)
    out.push_back({reinterpret_cast<void*>(address), bytes, dtype, dims});
  return out;
}

}  // namespace

void search_nccl_once();

// The CUDA XLA handler's logic on raw GPU addresses, as XLA would call it.
std::string xla_stream_call(int64_t op, const std::string& names, const std::vector<RawArray>& args,
                            const std::vector<RawArray>& rets, int64_t reduce_op, double prescale, double postscale,
                            int64_t root, int64_t process_set, int32_t device, uint64_t stream) {
  search_nccl_once();
  const ring::xla_call::Attrs attrs{op, reduce_op, root, process_set, prescale, postscale};
  const std::vector<ring::xla_call::Array> ins = arrays_of(args), outs = arrays_of(rets);
  nb::gil_scoped_release unlocked;
  return ring::xla_call::run_on_stream(ring::engine_api(), attrs, names, ins, outs, device, stream);
}

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
  m.def("xla_stream_call", &xla_stream_call, "op"_a, "names"_a, "args"_a, "rets"_a, "reduce_op"_a = 0,
        "prescale"_a = 1.0, "postscale"_a = 1.0, "root"_a = 0, "process_set"_a = 0, "device"_a = 0, "stream"_a = 0,
        "What the CUDA XLA FFI handler does (native/frameworks/xla/collective_call.h, run_on_stream), on "
        "GPU memory given as (address, bytes, dtype code, dims) tuples, with XLA's stream and device as "
        "`stream` (a CUstream) and `device`; args past the '\\n'-separated names only order the call. Blocks "
        "(without the GIL) as the handler does; returns '' or '<ErrorClass>: message'. For tests on the CUDA "
        "stand-ins and device checks: JAX and TensorFlow call the handler itself.");
}
