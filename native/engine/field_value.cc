#include "engine/field_value.h"

#include <cstdio>
#include <cstdlib>

namespace ring {

std::string describe_value(const std::string& v) { return v; }
std::string describe_value(OpType v) { return op_type_name(v); }
std::string describe_value(DataType v) { return dtype_name(v); }
std::string describe_value(ReduceOp v) { return reduce_op_name(v); }
std::string describe_value(int32_t v) { return std::to_string(v); }
std::string describe_value(const Device& v) { return device_name(v); }

std::string describe_value(double v) {
  // Six significant digits when they say exactly which value it is, more
  // when two different values would read the same.
  char buf[32];
  for (int digits : {6, 15, 16, 17}) {
    std::snprintf(buf, sizeof(buf), "%.*g", digits, v);
    if (std::isnan(v) || std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

std::string describe_value(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

}  // namespace ring
