#include "common/device.h"

#include "common/error.h"

namespace ring {
namespace {

const char* const kTypeNames[kNumDeviceTypes] = {"cpu", "cuda"};

}  // namespace

bool is_valid_device(int type, int64_t index) {
  if (type < 0 || type >= kNumDeviceTypes || index < 0 || index > kMaxDeviceIndex) return false;
  return static_cast<DeviceType>(type) != DeviceType::CPU || index == 0;
}

std::string device_name(const Device& d) {
  const int t = static_cast<int>(d.type);
  if (t < 0 || t >= kNumDeviceTypes) return "unknown";
  if (d.type == DeviceType::CPU) return kTypeNames[t];
  return std::string(kTypeNames[t]) + ":" + std::to_string(d.index);
}

Device parse_device(const std::string& text) {
  const size_t colon = text.find(':');
  const std::string type = text.substr(0, colon);
  for (int t = 0; t < kNumDeviceTypes; ++t) {
    if (type != kTypeNames[t]) continue;
    int64_t index = 0;
    if (colon != std::string::npos) {
      const std::string digits = text.substr(colon + 1);
      if (digits.empty() || digits.size() > 6 || digits.find_first_not_of("0123456789") != std::string::npos)
        break;
      index = std::stoll(digits);
    }
    if (!is_valid_device(t, index)) break;
    return Device{static_cast<DeviceType>(t), static_cast<int32_t>(index)};
  }
  throw_error(ErrorKind::BadArgument, "device should be 'cpu' or 'cuda:<index>'. Got: '" + text + "'");
}

}  // namespace ring
