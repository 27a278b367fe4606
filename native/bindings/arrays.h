// Arrays as the engine sees them: where their bytes are, how many, on which
// device, and their shape. A numpy array is read through the buffer
// protocol (much cheaper than a DLPack export per array, which a group of
// hundreds pays once per tensor); any other array (torch, cupy, ...)
// through nanobind's DLPack import.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/device.h"

namespace nb = nanobind;

// Arrays from any device; enqueue() checks that the engine serves it.
using AnyArray = nb::ndarray<nb::c_contig>;
using ReadOnlyArray = nb::ndarray<nb::ro, nb::c_contig>;

struct ArrayRef {
  void* data = nullptr;
  size_t nbytes = 0;
  ring::Device device;
  std::vector<int64_t> shape;
};

// The engine's view of an imported array; BadArgument (naming the tensor)
// for a DLPack device other than host memory or a CUDA GPU.
ArrayRef array_ref(const ReadOnlyArray& a, const std::string& name);
ArrayRef array_ref(const AnyArray& a, const std::string& name);

// `list[i]`, C-contiguous (and writeable when `writeable`), without
// conversion; nullopt for None when `optional`; BadArgument naming the
// tensor otherwise.
std::optional<ArrayRef> group_array(const nb::list& list, size_t i, const std::string& name, const char* which,
                                    bool optional, bool writeable);
