#include "bindings/arrays.h"

#include <nanobind/ndarray.h>
#include <nanobind/stl/vector.h>

#include "common/error.h"

namespace {

// Arrays from any device; enqueue() checks that the engine serves it.
using AnyArray = nb::ndarray<nb::c_contig>;
using ReadOnlyArray = nb::ndarray<nb::ro, nb::c_contig>;

// The engine's Device for an array's DLPack device: host memory (pinned
// host memory included) or a CUDA GPU. BadArgument for any other.
template <class Array>
ring::Device device_of(const Array& a, const std::string& name) {
  ring::Device d;
  switch (a.device_type()) {
    case nb::device::cpu::value:
    case nb::device::cuda_host::value:
      return d;
    case nb::device::cuda::value:
    case nb::device::cuda_managed::value:
      d.type = ring::DeviceType::CUDA;
      d.index = a.device_id();
      return d;
    default:
      throw ring::RingError(ring::ErrorKind::BadArgument,
                            "tensor '" + name + "' is on DLPack device type " + std::to_string(a.device_type()) +
                                ": ring runs on host memory and CUDA GPUs");
  }
}

template <class Array>
ArrayRef ref_of(const Array& a, const std::string& name) {
  ArrayRef r;
  r.data = const_cast<void*>(static_cast<const void*>(a.data()));
  r.nbytes = a.nbytes();
  r.device = device_of(a, name);
  r.shape.assign(a.shape_ptr(), a.shape_ptr() + a.ndim());
  return r;
}

// numpy.ndarray's type object (numpy imported on first use).
PyTypeObject* numpy_array_type() {
  static PyTypeObject* type = reinterpret_cast<PyTypeObject*>(nb::module_::import_("numpy").attr("ndarray").ptr());
  return type;
}

// An exact numpy array through the buffer protocol; nullopt when numpy
// refuses the request (not C-contiguous, read-only where writeable is
// asked), leaving the error to the general path.
std::optional<ArrayRef> numpy_ref(nb::handle item, bool writeable) {
  if (Py_TYPE(item.ptr()) != numpy_array_type()) return std::nullopt;
  Py_buffer view;
  if (PyObject_GetBuffer(item.ptr(), &view, PyBUF_C_CONTIGUOUS | (writeable ? PyBUF_WRITABLE : 0)) != 0) {
    PyErr_Clear();
    return std::nullopt;
  }
  // The caller's array keeps the memory alive; releasing the view frees nothing of it.
  ArrayRef r;
  r.data = view.buf;
  r.nbytes = static_cast<size_t>(view.len);
  r.shape.assign(view.shape, view.shape + view.ndim);
  PyBuffer_Release(&view);
  return r;
}

// A span of host memory its front end describes itself, the tuple
// (address, nbytes, shape): for arrays whose DLPack export costs
// microseconds (torch's CPU tensors). nullopt for anything else. The front
// end vouches that the memory is contiguous, writeable where an output
// goes, and alive until the handle is released; the caller still checks
// nbytes against the shape and dtype.
std::optional<ArrayRef> host_span(nb::handle item, const std::string& name, const char* which) {
  if (!PyTuple_CheckExact(item.ptr()) || PyTuple_GET_SIZE(item.ptr()) != 3) return std::nullopt;
  nb::tuple t = nb::borrow<nb::tuple>(item);
  ArrayRef r;
  uintptr_t address = 0;
  int64_t nbytes = -1;
  if (!nb::try_cast(t[0], address) || !nb::try_cast(t[1], nbytes) || nbytes < 0 ||
      !nb::try_cast(t[2], r.shape) || (address == 0 && nbytes > 0))
    throw ring::RingError(ring::ErrorKind::BadArgument, std::string(which) + " of tensor '" + name +
                                                            "' should be (address, nbytes, shape) of host memory");
  r.data = reinterpret_cast<void*>(address);
  r.nbytes = static_cast<size_t>(nbytes);
  return r;
}

}  // namespace

std::optional<ArrayRef> array_of(nb::handle item, const std::string& name, const char* which, bool optional,
                                 bool writeable) {
  if (optional && item.is_none()) return std::nullopt;
  if (std::optional<ArrayRef> fast = numpy_ref(item, writeable)) return fast;
  if (std::optional<ArrayRef> span = host_span(item, name, which)) return span;
  auto imported = [&](auto array) -> ArrayRef {
    if (!nb::try_cast(item, array, false))
      throw ring::RingError(ring::ErrorKind::BadArgument, std::string(which) + " of tensor '" + name +
                                                              "' should be a C-contiguous array. Got: " +
                                                              nb::type_name(item.type()).c_str());
    return ref_of(array, name);
  };
  return writeable ? imported(AnyArray()) : imported(ReadOnlyArray());
}
