#include "common/log.h"

#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>

namespace ring {
namespace {

std::atomic<int> g_level{static_cast<int>(LogLevel::Warning)};
std::atomic<int> g_rank{-1};

std::string timestamp() {
  timeval tv{};
  ::gettimeofday(&tv, nullptr);
  tm parts{};
  ::localtime_r(&tv.tv_sec, &parts);
  char buf[64];
  size_t n = ::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", &parts);
  std::snprintf(buf + n, sizeof(buf) - n, ".%06ld", static_cast<long>(tv.tv_usec));
  return buf;
}

}  // namespace

void set_log_config(LogLevel level, int rank) {
  g_level.store(static_cast<int>(level));
  g_rank.store(rank);
}

bool log_enabled(LogLevel level) { return static_cast<int>(level) >= g_level.load(std::memory_order_relaxed); }

const char* log_level_name(LogLevel level) {
  static const char* names[] = {"trace", "debug", "info", "warning", "error"};
  return names[static_cast<int>(level)];
}

void log_line(LogLevel level, const std::string& message) {
  if (!log_enabled(level)) return;
  std::string line = "[" + timestamp() + " ring";
  int rank = g_rank.load();
  if (rank >= 0) line += " rank " + std::to_string(rank);
  line += std::string(" ") + log_level_name(level) + "] " + message + "\n";
  const char* p = line.data();
  size_t left = line.size();
  while (left > 0) {
    ssize_t w = ::write(STDERR_FILENO, p, left);
    if (w <= 0) break;
    p += w;
    left -= static_cast<size_t>(w);
  }
}

}  // namespace ring
