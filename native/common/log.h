// Logging to stderr with the rank and the time on every line:
//   [2026-12-02 15:04:05.123456 ring rank 1 warning] message
// The level comes from RING_LOG_LEVEL (engine/config.cc); messages below it
// cost one comparison. Lines are written with one write() each, so lines of
// different threads never interleave.
#pragma once

#include <string>

namespace ring {

enum class LogLevel { Trace = 0, Debug, Info, Warning, Error };

// Sets the threshold and the rank shown (-1: no rank yet). Thread-safe.
void set_log_config(LogLevel level, int rank);
bool log_enabled(LogLevel level);
void log_line(LogLevel level, const std::string& message);

const char* log_level_name(LogLevel level);

}  // namespace ring
