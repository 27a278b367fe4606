// The spellings of configuration values: one rule for every variable of the
// engine's table and every value ringrun checks for it.
//
//   boolean  1, true, yes, on / 0, false, no, off, in any case
//   integer  decimal digits with an optional sign: 0, 42, -1
//            (not 1e3, 0x10, 1_000, 1.0); it must fit in 64 bits
//   number   a finite decimal with an optional fraction and exponent:
//            2, 0.5, .5, 5., 1e-3 (not inf, nan, 0x1p3, 1_000)
//   word     one of a variable's words (auto, tcp, warning, ...), in any case
//
// Spaces around a value are ignored. ring_strategy/_config_values.py is the
// same rule for the launcher, which runs without this engine; the tests in
// tests/test_config_values.py feed both the same spellings.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string_view>

namespace ring {

// Each returns the value `text` spells, or nullopt when it spells none.
std::optional<bool> parse_bool(std::string_view text);
std::optional<int64_t> parse_integer(std::string_view text);
std::optional<double> parse_number(std::string_view text);
// The index in `words` (lower case) of the one `text` spells.
std::optional<size_t> parse_word(std::string_view text, std::initializer_list<std::string_view> words);

// What an error adds about the boolean spellings after "should be 0 or 1".
constexpr const char* kBoolSpellings = "true, yes, on and false, no, off are accepted too, in any case";

}  // namespace ring
