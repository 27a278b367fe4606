// Where a tensor's memory lives. Every request names its device; the
// executor runs each response on the first backend that serves its device
// (engine/backend.h). A device no backend serves is refused at enqueue.
//
// The numeric values travel in control messages, so never renumber them.
#pragma once

#include <cstdint>
#include <string>

namespace ring {

enum class DeviceType : uint8_t {
  CPU = 0,   // host memory
  CUDA = 1,  // an NVIDIA GPU's memory (no backend yet)
};
constexpr int kNumDeviceTypes = static_cast<int>(DeviceType::CUDA) + 1;

struct Device {
  DeviceType type = DeviceType::CPU;
  int32_t index = 0;  // which device of its type (0 for the CPU)

  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
};

constexpr int32_t kMaxDeviceIndex = (1 << 16) - 1;

// "cpu", "cuda:1".
std::string device_name(const Device& d);
// Parses "cpu", "cuda" (index 0) or "cuda:<index>"; throws
// RingError(BadArgument) quoting `text` otherwise.
Device parse_device(const std::string& text);
bool is_valid_device(int type, int64_t index);

}  // namespace ring
