// ring_strategy._native: the engine's only Python binding.
//
// Arrays cross through DLPack (nb::ndarray), zero-copy for numpy, torch,
// TensorFlow and JAX CPU arrays. Blocking calls release the GIL. C++
// RingErrors become the Python exception classes created here, one per
// ErrorKind, so errors are defined once.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "bindings/arrays.h"
#include "collectives/allreduce_choice.h"
#include "collectives/slices.h"
#include "common/device.h"
#include "common/error.h"
#include "common/types.h"
#include "engine/config.h"
#include "engine/mesh_names.h"
#include "engine/published.h"
#include "engine/runtime.h"
#include "frameworks/engine_calls.h"
#include "gpu/device_streams.h"
#ifdef RING_HAS_XLA_FFI
#include "frameworks/xla/collective_ffi.h"
#endif

namespace nb = nanobind;
using namespace nb::literals;

void register_parsers(nb::module_& m);  // parsers.cc
void register_gpu(nb::module_& m);      // gpu.cc
void register_signals(nb::module_& m);  // signals.cc
void search_nccl_once();                // gpu.cc

namespace {

PyObject* g_errors[ring::kNumErrorKinds] = {};

PyObject* new_error(nb::module_& m, const char* name, PyObject* bases, const char* doc) {
  std::string qual = std::string("ring_strategy._native.") + name;
  PyObject* cls = PyErr_NewExceptionWithDoc(qual.c_str(), doc, bases, nullptr);
  if (!cls) throw nb::python_error();
  m.attr(name) = nb::handle(cls);
  return cls;
}

void translate_error(const std::exception_ptr& p, void*) {
  try {
    std::rethrow_exception(p);
  } catch (const ring::RingError& e) {
    // Messages may quote bytes from a peer: never fail on invalid UTF-8.
    const char* what = e.what();
    PyObject* msg = PyUnicode_DecodeUTF8(what, static_cast<Py_ssize_t>(std::strlen(what)), "replace");
    if (!msg) return;  // the decode error stays set
    const int kind = static_cast<int>(e.kind());
    PyErr_SetObject(g_errors[ring::is_valid_error_kind(kind) ? kind : 0], msg);
    Py_DECREF(msg);
  }
}

// One Python class per ErrorKind: the kind's class derives from RingError
// (the Internal kind's), or from HorovodInternalError (a RingError: what a
// job that lost a rank raises, caught by elastic training loops) when
// `lost` is set, and from `also` when set.
void register_errors(nb::module_& m) {
  using ring::ErrorKind;
  struct ErrorClass {
    ErrorKind kind;
    const char* name;
    bool lost;
    PyObject* also;
    const char* doc;
  };
  const ErrorClass classes[] = {
      {ErrorKind::Internal, "RingError", false, PyExc_RuntimeError, "Base class of every error raised by ring."},
      {ErrorKind::BadArgument, "BadArgumentError", false, PyExc_ValueError,
       "An argument is invalid; nothing was sent."},
      {ErrorKind::Mismatch, "MismatchError", false, nullptr,
       "Ranks submitted the same tensor name with different properties."},
      {ErrorKind::PeerFailure, "PeerFailureError", true, nullptr, "A peer process died or closed its connection."},
      {ErrorKind::Timeout, "RingTimeoutError", true, PyExc_TimeoutError, "No progress within RING_TIMEOUT_SECONDS."},
      {ErrorKind::Shutdown, "ShutdownError", false, nullptr, "ring is not initialized, or has been shut down."},
  };
  static_assert(sizeof(classes) / sizeof(classes[0]) == ring::kNumErrorKinds, "one Python class per ErrorKind");
  PyObject* base = nullptr;
  PyObject* lost = nullptr;
  for (const ErrorClass& c : classes) {
    PyObject* parent = c.lost ? lost : base;
    PyObject* pair = parent && c.also ? PyTuple_Pack(2, parent, c.also) : nullptr;
    PyObject* cls = new_error(m, c.name, pair ? pair : parent ? parent : c.also, c.doc);
    Py_XDECREF(pair);
    if (!base) {
      base = cls;
      lost = new_error(m, "HorovodInternalError", base,
                       "The job lost a rank or timed out: the collective failed on this rank (PeerFailureError, "
                       "RingTimeoutError).");
    }
    g_errors[static_cast<int>(c.kind)] = cls;
  }
  nb::register_exception_translator(translate_error);
}

// The device of `input` (and `output`, which must be on the same one);
// `device` ("" or e.g. "cuda:0", what the front end says) must agree.
ring::Device check_devices(const ArrayRef& input, const std::optional<ArrayRef>& output, const std::string& device,
                           const std::string& name) {
  const ring::Device d = input.device;
  if (!device.empty() && ring::parse_device(device) != d)
    throw ring::RingError(ring::ErrorKind::BadArgument, "tensor '" + name + "' is on " + ring::device_name(d) +
                                                            ", not on " + device + " as the call says");
  if (output && output->device != d)
    throw ring::RingError(ring::ErrorKind::BadArgument, "the output of '" + name + "' is on " +
                                                            ring::device_name(output->device) + "; its input is on " +
                                                            ring::device_name(d));
  return d;
}

// Checks that `a` holds exactly the bytes `req` describes.
void check_array(const ArrayRef& a, const ring::Request& req, const char* which) {
  size_t expected = static_cast<size_t>(req.num_elements()) * ring::dtype_size(req.dtype);
  if (a.nbytes != expected)
    throw ring::RingError(ring::ErrorKind::BadArgument,
                          std::string(which) + " of '" + req.name + "' has " + std::to_string(a.nbytes) +
                              " bytes; its shape and dtype need " + std::to_string(expected));
}

// The fields every member of a group shares with the others (a single
// enqueue's too), as the front end passes them.
struct SharedFields {
  int op = 0;
  int reduce_op = 0;
  int root = 0;
  double prescale = 1.0;
  double postscale = 1.0;
  int32_t process_set = 0;
  bool wake = true;
};

// One operation's EnqueueArgs, after the checks of its codes, devices and
// byte counts (BadArgument naming the tensor). `input`/`output` stay owned
// by the caller's arrays.
ring::EnqueueArgs make_args(const SharedFields& f, const std::string& name, const ArrayRef& input,
                            const std::optional<ArrayRef>& output, int dtype, std::vector<int64_t> shape,
                            std::vector<int64_t> splits, const std::string& device, uint64_t stream) {
  auto bad = [&](const std::string& what) {
    throw ring::RingError(ring::ErrorKind::BadArgument, "tensor '" + name + "': " + what);
  };
  if (f.op < 0 || f.op >= ring::kNumOpTypes) bad("unknown operation");
  if (!ring::is_valid_dtype(dtype)) bad("unsupported dtype code " + std::to_string(dtype));
  if (!ring::is_valid_reduce_op(f.reduce_op)) bad("unknown reduce op");
  ring::EnqueueArgs args;
  args.req.name = name;
  args.req.op = static_cast<ring::OpType>(f.op);
  args.req.dtype = static_cast<ring::DataType>(dtype);
  args.req.reduce_op = static_cast<ring::ReduceOp>(f.reduce_op);
  args.req.root = f.root;
  args.req.prescale = f.prescale;
  args.req.postscale = f.postscale;
  args.req.shape = std::move(shape);
  args.req.splits = std::move(splits);
  args.req.device = check_devices(input, output, device, name);
  if (args.req.device.type == ring::DeviceType::CUDA) search_nccl_once();
  args.stream = stream;
  args.req.process_set = f.process_set;
  check_array(input, args.req, "input");
  args.input = input.data;
  if (output) {
    args.output = output->data;
    args.output_bytes = output->nbytes;
  }
  args.wake = f.wake;
  return args;
}

int64_t enqueue(ring::Runtime& rt, int op, const std::string& name, nb::handle input, nb::handle output, int dtype,
                int reduce_op, int root, double prescale, double postscale, const std::vector<int64_t>& shape,
                const std::vector<int64_t>& splits, bool wake, const std::string& device, int32_t process_set,
                uint64_t stream) {
  const SharedFields f{op, reduce_op, root, prescale, postscale, process_set, wake};
  return rt.enqueue(make_args(f, name, *array_of(input, name, "input", false, false),
                              array_of(output, name, "output", true, true), dtype, shape, splits, device, stream));
}

// enqueue() of a reduction shaped as its input, with no splits and no
// stream: the front ends' short path for host arrays, with fewer arguments
// to convert (wake = false: its caller waits for it at once).
int64_t enqueue_reduce(ring::Runtime& rt, int op, const std::string& name, nb::handle input, nb::handle output,
                       int dtype, int reduce_op, double prescale, double postscale, int32_t process_set, bool wake) {
  const SharedFields f{op, reduce_op, 0, prescale, postscale, process_set, wake};
  ArrayRef in = *array_of(input, name, "input", false, false);
  std::vector<int64_t> shape = std::move(in.shape);
  return rt.enqueue(make_args(f, name, in, array_of(output, name, "output", true, true), dtype, std::move(shape), {},
                              "", 0));
}

// Runtime::enqueue_group of one operation per name, all with the fields `f`:
// inputs[i] and outputs[i] (None: the engine allocates; `outputs` None: for
// every member), dtypes[i], shapes[i] (None: each input's own shape),
// streams[i] (empty: 0 for every member). Nothing is queued when a member
// is bad.
std::vector<int64_t> enqueue_group(ring::Runtime& rt, int op, const std::vector<std::string>& names,
                                   const nb::list& inputs, const std::optional<nb::list>& outputs,
                                   const std::vector<int>& dtypes,
                                   const std::optional<std::vector<std::vector<int64_t>>>& shapes, int reduce_op,
                                   int root, double prescale, double postscale, bool wake, int32_t process_set,
                                   const std::vector<uint64_t>& streams) {
  const size_t n = names.size();
  auto length = [&](const char* what, size_t got) {
    if (got != n)
      throw ring::RingError(ring::ErrorKind::BadArgument, std::string("enqueue_group: ") + std::to_string(n) +
                                                              " names but " + std::to_string(got) + " " + what);
  };
  length("inputs", nb::len(inputs));
  if (outputs) length("outputs", nb::len(*outputs));
  length("dtypes", dtypes.size());
  if (shapes) length("shapes", shapes->size());
  if (!streams.empty()) length("streams", streams.size());
  const SharedFields f{op, reduce_op, root, prescale, postscale, process_set, wake};
  std::vector<ring::EnqueueArgs> group;
  group.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const std::string& name = names[i];
    ArrayRef in = *array_of(inputs[i], name, "input", false, false);
    std::optional<ArrayRef> out = outputs ? array_of((*outputs)[i], name, "output", true, true) : std::nullopt;
    std::vector<int64_t> shape = shapes ? (*shapes)[i] : std::move(in.shape);
    group.push_back(make_args(f, name, in, out, dtypes[i], std::move(shape), {}, "", streams.empty() ? 0 : streams[i]));
  }
  return rt.enqueue_group(std::move(group));
}

// A result in GPU memory, as Python sees it: an object of the DLPack
// protocol (torch.from_dlpack, cupy.from_dlpack take it) whose one capsule
// owns the memory. The result is complete when its handle is: any stream
// may read it.
struct DeviceArray {
  nb::object capsule;  // None once taken
  int device = 0;
  size_t nbytes = 0;
  std::shared_ptr<void> ready;  // OpResult::device_ready: the consumer's stream waits for it
};

nb::object device_result(ring::OpResult& res) {
  auto* owner = new std::shared_ptr<void>(std::move(res.device_data));
  nb::capsule deleter(owner, [](void* p) noexcept { delete static_cast<std::shared_ptr<void>*>(p); });
  size_t shape[1] = {res.device_bytes};
  nb::ndarray<uint8_t, nb::ndim<1>> array(owner->get(), 1, shape, deleter, nullptr, nb::dtype<uint8_t>(),
                                          nb::device::cuda::value, res.device.index);
  return nb::cast(DeviceArray{nb::cast(array), res.device.index, res.device_bytes, std::move(res.device_ready)});
}

void register_device_array(nb::module_& m) {
  nb::class_<DeviceArray>(m, "DeviceArray")
      .def(
          "__dlpack__",
          [](DeviceArray& a, nb::kwargs kwargs) {
            if (a.capsule.is_none())
              throw ring::RingError(ring::ErrorKind::BadArgument, "this GPU result was already taken through DLPack");
            // DLPack's stream: the consumer's (None: the legacy default stream, -1: no wait).
            nb::object stream = kwargs.contains("stream") ? nb::object(kwargs["stream"]) : nb::none();
            const int64_t s = stream.is_none() ? 1 : nb::cast<int64_t>(stream);
            if (a.ready && s != -1) ring::gpu::stream_wait_event(a.device, static_cast<uint64_t>(s), a.ready);
            nb::object c = a.capsule;
            a.capsule = nb::none();
            return c;
          },
          "A DLPack capsule of the result (flat uint8), once; the consumer's `stream` waits for the result.")
      .def("__dlpack_device__", [](const DeviceArray& a) { return nb::make_tuple(nb::device::cuda::value, a.device); })
      .def_ro("nbytes", &DeviceArray::nbytes);
}

// A released result as Python sees it: (data, shape, received_splits).
nb::tuple result_tuple(ring::OpResult& res) {
  nb::object data = nb::none();
  if (res.device_data) {
    data = device_result(res);
  } else if (res.data) {
    auto* owner = new std::shared_ptr<std::vector<uint8_t>>(std::move(res.data));
    nb::capsule deleter(owner, [](void* p) noexcept { delete static_cast<std::shared_ptr<std::vector<uint8_t>>*>(p); });
    size_t n = (*owner)->size();
    data = nb::cast(nb::ndarray<nb::numpy, uint8_t, nb::ndim<1>>((*owner)->data(), {n}, deleter));
  }
  return nb::make_tuple(data, res.shape, res.received_splits);
}

nb::tuple release(ring::Runtime& rt, int64_t handle) {
  ring::OpResult res = rt.release(handle);
  return result_tuple(res);
}

nb::dict config_dict(const ring::Config& c) {
  nb::dict d;
  d["fusion_threshold_bytes"] = c.fusion_threshold_bytes;
  d["cycle_time_ms"] = c.cycle_time_ms;
  d["cache_capacity"] = c.cache_capacity;
  d["timeout_seconds"] = c.timeout_seconds;
  d["transport"] = c.force_tcp ? "tcp" : "shm";
  // The cache-tuned sizes: what the user set, None for auto (common/cache_tuning.h).
  const auto& o = c.cache_overrides;
  d["shm_ring_bytes"] = o.shm_ring_bytes ? nb::cast(*o.shm_ring_bytes) : nb::none();
  d["pair_block_bytes"] = o.pair_block_bytes ? nb::cast(*o.pair_block_bytes) : nb::none();
  d["streaming_stores"] = o.streaming_stores ? nb::cast(*o.streaming_stores) : nb::none();
  d["log_level"] = static_cast<int>(c.log_level);
  d["stall_check_seconds"] = c.stall_check_seconds;
  d["stall_shutdown_seconds"] = c.stall_shutdown_seconds;
  d["timeline"] = c.timeline_path;
  d["timeline_mark_cycles"] = c.timeline_mark_cycles;
  d["dynamic_process_sets"] = c.dynamic_process_sets;
  d["encrypt"] = c.encrypt;
  d["hierarchical_allreduce"] = c.hierarchical_allreduce;
  d["allreduce_algorithm"] = ring::kAllreduceModeNames[static_cast<int>(c.allreduce_mode)];
  d["autotune"] = c.autotune;
  d["autotune_log"] = c.autotune_log;
  d["autotune_sample_seconds"] = c.autotune_sample_seconds;
  d["autotune_warmup_samples"] = c.autotune_warmup_samples;
  d["gpu_operations"] = c.gpu_host_staged ? "host" : "nccl";
  d["nccl_streams"] = c.nccl_streams;
  d["async_completion"] = c.async_completion;
  return d;
}

void register_constants(nb::module_& m) {
  m.attr("TIMELINE_DYNAMIC") = ring::kTimelineDynamic;  // RING_TIMELINE's "no file until start_timeline()"
  m.attr("OP_ALLREDUCE") = int(ring::OpType::Allreduce);
  m.attr("OP_ALLGATHER") = int(ring::OpType::Allgather);
  m.attr("OP_BROADCAST") = int(ring::OpType::Broadcast);
  m.attr("OP_ALLTOALL") = int(ring::OpType::Alltoall);
  m.attr("OP_REDUCESCATTER") = int(ring::OpType::Reducescatter);
  m.attr("OP_BARRIER") = int(ring::OpType::Barrier);
  m.attr("OP_JOIN") = int(ring::OpType::Join);
  m.attr("NUM_OP_TYPES") = ring::kNumOpTypes;
  m.attr("NUM_ERROR_KINDS") = ring::kNumErrorKinds;  // kinds 0 .. NUM_ERROR_KINDS - 1 (common/error.h)
  nb::dict dtypes;
  for (int i = 0; i < ring::kNumDataTypes; ++i) dtypes[ring::dtype_name(static_cast<ring::DataType>(i))] = i;
  m.attr("DTYPES") = dtypes;
  nb::dict ops;
  for (int i = 0; i < ring::kNumReduceOps; ++i) ops[ring::reduce_op_name(static_cast<ring::ReduceOp>(i))] = i;
  m.attr("REDUCE_OPS") = ops;
}

// Rules the engine applies that Python needs too, computed by the engine's code.
void register_rules(nb::module_& m) {
  m.def("config_table", [] {
    std::vector<std::tuple<std::string, std::string, std::string, std::string>> rows;
    for (const auto& e : ring::config_table()) rows.emplace_back(e.name, e.alias, e.default_value, e.doc);
    return rows;
  });
  m.def(
      "parse_config",
      [](const std::map<std::string, std::string>& environ) {
        return config_dict(ring::Config::from([&](const char* name) -> const char* {
          auto it = environ.find(name);
          return it == environ.end() ? nullptr : it->second.c_str();
        }));
      },
      "environ"_a,
      "The configuration init() would read from `environ` (a mapping of variables), as a dict; raises "
      "BadArgumentError naming the variable as init() would.");
  m.def(
      "reducescatter_rows",
      [](int64_t rows, int size, int rank) {
        if (rows < 0 || size < 1 || rank < 0 || rank >= size)
          throw ring::RingError(ring::ErrorKind::BadArgument,
                                "reducescatter_rows needs rows >= 0 and 0 <= rank < size. Got: rows " +
                                    std::to_string(rows) + ", size " + std::to_string(size) + ", rank " +
                                    std::to_string(rank));
        return static_cast<int64_t>(ring::slice_count(static_cast<size_t>(rows), size, rank));
      },
      "rows"_a, "size"_a, "rank"_a);
  m.def(
      "allreduce_algorithm",
      [](const std::string& mode, int size, bool one_host, size_t batch) {
        for (size_t i = 0; i < std::size(ring::kAllreduceModeNames); ++i)
          if (mode == ring::kAllreduceModeNames[i])
            return std::string(ring::allreduce_phase(
                ring::choose_allreduce(static_cast<ring::AllreduceMode>(i), size, one_host, batch)));
        throw ring::RingError(ring::ErrorKind::BadArgument, "unknown RING_ALLREDUCE_ALGORITHM value '" + mode + "'");
      },
      "mode"_a, "size"_a, "one_host"_a, "batch"_a,
      "The flat allreduce the engine runs for a batch of `batch` bytes on `size` ranks (all on one host or "
      "not), as its timeline phase name (RING_ALLREDUCE, ...).");
  m.def(
      "engine_api_address", [] { return reinterpret_cast<uintptr_t>(ring::engine_api()); },
      "The address of the engine's C interface (native/frameworks/engine_api.h), handed to framework operation "
      "libraries built outside this module.");
  m.def("engine_api_version", [] { return RING_ENGINE_API_VERSION; });
#ifdef RING_HAS_XLA_FFI
  m.attr("HAS_XLA_FFI") = true;
  m.def(
      "xla_ffi_handlers",
      [](const std::string& platform) {
        if (platform != "cpu" && platform != "CUDA")
          throw ring::RingError(ring::ErrorKind::BadArgument, "no XLA FFI handlers for platform '" + platform + "'");
        nb::dict d;
        d[RING_XLA_COLLECTIVE_TARGET] =
            nb::capsule(reinterpret_cast<void*>(platform == "cpu" ? &RingCollectiveCpu : &RingCollectiveCuda));
        return d;
      },
      "platform"_a = "cpu",
      "XLA FFI handlers (target name -> PyCapsule) for jax.ffi.register_ffi_target on `platform`: 'cpu' (host "
      "memory) or 'CUDA' (GPU memory, on XLA's stream).");
#else
  m.attr("HAS_XLA_FFI") = false;
#endif
  m.def("shm_segment_names", &ring::shm_segment_names, "job_id"_a, "rank"_a);
  m.def("cpus_per_rank", &ring::cpus_per_rank, "local_size"_a,
        "The CPUs this process may run on, divided by the ranks of its host (what decides whether the "
        "engine's waits spin).");
}

void new_runtime(ring::Runtime* self, int rank, int size, int local_rank, int local_size, int cross_rank,
                 int cross_size, nb::bytes secret, std::string job_id, std::string host_id, std::string bind_host,
                 std::string advertise_host) {
  ring::RuntimeOptions o;
  o.rank = rank;
  o.size = size;
  o.local_rank = local_rank;
  o.local_size = local_size;
  o.cross_rank = cross_rank;
  o.cross_size = cross_size;
  o.secret = std::string(secret.c_str(), secret.size());
  o.job_id = std::move(job_id);
  o.host_id = std::move(host_id);
  o.bind_host = std::move(bind_host);
  o.advertise_host = std::move(advertise_host);
  new (self) ring::Runtime(std::move(o));
}

// Calls `wait(timeout_s)` (true: finished) with the GIL released until it
// returns true, running Python's signal handlers at least every
// kSignalCheckSeconds: an exception a handler raises (KeyboardInterrupt, a
// SIGALRM timeout) propagates, and what was waited for stays as it was (it
// can be waited for again).
template <class Wait>
void wait_with_signals(Wait wait) {
  constexpr double kSignalCheckSeconds = 0.1;
  while (true) {
    bool done;
    {
      nb::gil_scoped_release unlocked;
      done = wait(kSignalCheckSeconds);
    }
    if (done) return;
    if (PyErr_CheckSignals() != 0) throw nb::python_error();
  }
}

// Blocks until `handle` has finished (see wait_with_signals).
void wait_interruptibly(ring::Runtime& rt, int64_t handle) {
  wait_with_signals([&](double timeout_s) { return rt.wait(handle, timeout_s); });
}

// With `results` false the result is dropped (None is returned; an error
// is still raised): for callers that gave every output buffer themselves.
nb::object wait_release(ring::Runtime& rt, int64_t handle, bool results) {
  wait_interruptibly(rt, handle);
  if (!results) {
    rt.release(handle);
    return nb::none();
  }
  return release(rt, handle);
}

// wait_release() of a group: waits for every handle (see wait_with_signals:
// when a signal handler raises, every handle stays as it was), then
// releases all and returns their results in order (None when
// `want_results` is false), or raises the first failed one's error once
// all are released.
nb::object wait_release_group(ring::Runtime& rt, const std::vector<int64_t>& handles, bool want_results) {
  wait_with_signals([&](double timeout_s) { return rt.wait_all(handles, timeout_s); });
  std::vector<ring::OpResult> results = rt.release_all(handles);
  if (!want_results) return nb::none();
  nb::list out;
  for (ring::OpResult& res : results) out.append(result_tuple(res));
  return out;
}

void register_runtime(nb::module_& m) {
  nb::class_<ring::Runtime>(m, "Runtime")
      .def("__init__", &new_runtime, "rank"_a, "size"_a, "local_rank"_a, "local_size"_a, "cross_rank"_a,
           "cross_size"_a, "secret"_a, "job_id"_a, "host_id"_a, "bind_host"_a = "127.0.0.1",
           "advertise_host"_a = "127.0.0.1")
      .def("local_endpoint", &ring::Runtime::local_endpoint)
      .def("connect", &ring::Runtime::connect, "endpoints"_a, nb::call_guard<nb::gil_scoped_release>())
      .def(
          "start",
          [](ring::Runtime& rt) {
            rt.start();
            ring::publish_runtime(&rt);  // framework operations reach it from here on
          },
          "Starts the background thread and publishes this runtime to framework operations.")
      .def("cpus_per_rank", &ring::Runtime::cpus_per_rank)
      .def("enqueue", &enqueue, "op"_a, "name"_a, "input"_a, "output"_a.none(), "dtype"_a,
           "reduce_op"_a, "root"_a, "prescale"_a, "postscale"_a, "shape"_a, "splits"_a, "wake"_a = true,
           "device"_a = "", "process_set"_a = 0, "stream"_a = 0)
      .def("enqueue_reduce", &enqueue_reduce, "op"_a, "name"_a, "input"_a, "output"_a.none(), "dtype"_a,
           "reduce_op"_a, "prescale"_a, "postscale"_a, "process_set"_a, "wake"_a)
      .def("enqueue_group", &enqueue_group, "op"_a, "names"_a, "inputs"_a, "outputs"_a.none(), "dtypes"_a,
           "shapes"_a.none() = nb::none(), "reduce_op"_a = 0, "root"_a = 0, "prescale"_a = 1.0, "postscale"_a = 1.0,
           "wake"_a = true, "process_set"_a = 0, "streams"_a = std::vector<uint64_t>())
      .def("wait_release_group", &wait_release_group, "handles"_a, "results"_a = true)
      .def("add_process_set", &ring::Runtime::add_process_set, "id"_a, "ranks"_a)
      .def("remove_process_set", &ring::Runtime::remove_process_set, "id"_a)
      .def(
          "wait_set_idle",
          [](ring::Runtime& rt, int32_t id, double timeout_s) {
            const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
            bool idle = false;
            wait_with_signals([&](double chunk_s) {
              const double left = std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count();
              idle = rt.wait_set_idle(id, std::max(0.0, std::min(chunk_s, left)));
              return idle || left <= chunk_s;
            });
            return idle;
          },
          "id"_a, "timeout"_a,
          "Waits (GIL released, signal handlers run) until this rank has no unfinished operation of process set "
          "`id`; False when `timeout` seconds passed first.")
      .def("poll", &ring::Runtime::poll, "handle"_a)
      .def("wait", &ring::Runtime::wait, "handle"_a, "timeout"_a = -1.0, nb::call_guard<nb::gil_scoped_release>())
      .def("release", &release, "handle"_a)
      .def("wait_release", &wait_release, "handle"_a, "results"_a = true)
      .def("wait_interruptibly", &wait_interruptibly, "handle"_a)
      .def(
          "shutdown",
          [](ring::Runtime& rt) {
            ring::withdraw_runtime(&rt);
            rt.shutdown();
          },
          nb::call_guard<nb::gil_scoped_release>())
      .def("start_timeline", &ring::Runtime::start_timeline, "path"_a, "mark_cycles"_a = false)
      .def("stop_timeline", &ring::Runtime::stop_timeline)
      .def("running", &ring::Runtime::running)
      .def_prop_ro("config", [](ring::Runtime& rt) { return config_dict(rt.config()); });
}

}  // namespace

NB_MODULE(_native, m) {
  m.doc() = "ring native engine";
  m.attr("__version__") = "0.1.0";
  register_errors(m);
  register_parsers(m);
  register_constants(m);
  register_rules(m);
  register_runtime(m);
  register_device_array(m);
  register_gpu(m);
  register_signals(m);
}
