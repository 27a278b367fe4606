// The one Python extension module, ring_strategy._native.
#include <nanobind/nanobind.h>

namespace nb = nanobind;

NB_MODULE(_native, m) {
  m.doc() = "ring native engine";
  m.attr("__version__") = "0.1.0";
}
