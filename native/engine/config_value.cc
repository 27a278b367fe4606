#include "engine/config_value.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>

namespace ring {
namespace {

std::string_view trimmed(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Length of the run of digits at s[pos...].
size_t digits(std::string_view s, size_t pos) {
  size_t n = 0;
  while (pos + n < s.size() && is_digit(s[pos + n])) ++n;
  return n;
}

bool equals_lower(std::string_view s, std::string_view lower) {
  if (s.size() != lower.size()) return false;
  for (size_t i = 0; i < s.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(s[i])) != lower[i]) return false;
  return true;
}

}  // namespace

std::optional<bool> parse_bool(std::string_view text) {
  const auto i = parse_word(text, {"1", "true", "yes", "on", "0", "false", "no", "off"});
  if (!i) return std::nullopt;
  return *i < 4;
}

std::optional<size_t> parse_word(std::string_view text, std::initializer_list<std::string_view> words) {
  const std::string_view s = trimmed(text);
  size_t i = 0;
  for (std::string_view w : words) {
    if (equals_lower(s, w)) return i;
    ++i;
  }
  return std::nullopt;
}

std::optional<int64_t> parse_integer(std::string_view text) {
  const std::string_view s = trimmed(text);
  const size_t sign = !s.empty() && (s[0] == '+' || s[0] == '-') ? 1 : 0;
  const size_t n = digits(s, sign);
  if (n == 0 || sign + n != s.size()) return std::nullopt;
  // Accumulated as a negative number, whose range includes the int64 minimum.
  int64_t value = 0;
  for (size_t i = sign; i < s.size(); ++i) {
    const int d = s[i] - '0';
    if (value < (std::numeric_limits<int64_t>::min() + d) / 10) return std::nullopt;
    value = value * 10 - d;
  }
  if (s[0] == '-') return value;
  if (value == std::numeric_limits<int64_t>::min()) return std::nullopt;
  return -value;
}

std::optional<double> parse_number(std::string_view text) {
  const std::string_view s = trimmed(text);
  size_t pos = !s.empty() && (s[0] == '+' || s[0] == '-') ? 1 : 0;
  const size_t whole = digits(s, pos);
  pos += whole;
  size_t fraction = 0;
  if (pos < s.size() && s[pos] == '.') {
    fraction = digits(s, pos + 1);
    pos += 1 + fraction;
  }
  if (whole + fraction == 0) return std::nullopt;
  if (pos < s.size() && (s[pos] == 'e' || s[pos] == 'E')) {
    size_t exp = pos + 1;
    if (exp < s.size() && (s[exp] == '+' || s[exp] == '-')) ++exp;
    const size_t n = digits(s, exp);
    if (n == 0) return std::nullopt;
    pos = exp + n;
  }
  if (pos != s.size()) return std::nullopt;
  const std::string checked(s);
  const double value = std::strtod(checked.c_str(), nullptr);
  if (!std::isfinite(value)) return std::nullopt;
  return value;
}

}  // namespace ring
