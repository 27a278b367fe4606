// Arrays as the engine sees them: where their bytes are, how many, on which
// device, and their shape. A numpy array is read through the buffer
// protocol (much cheaper than a DLPack export per array, which a group of
// hundreds pays once per tensor); any other array (torch, cupy, ...)
// through nanobind's DLPack import, except host memory a front end
// describes itself as the tuple (address, nbytes, shape) (torch's CPU
// tensors, whose DLPack export costs more than the rest of an operation).
#pragma once

#include <nanobind/nanobind.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/device.h"

namespace nb = nanobind;

struct ArrayRef {
  void* data = nullptr;
  size_t nbytes = 0;
  ring::Device device;
  std::vector<int64_t> shape;
};

// `item` (`which` of tensor `name`: "input" or "output"), C-contiguous
// (and writeable when `writeable`), without conversion; nullopt for None
// when `optional`; BadArgument naming the tensor otherwise.
std::optional<ArrayRef> array_of(nb::handle item, const std::string& name, const char* which, bool optional,
                                 bool writeable);
