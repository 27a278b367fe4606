#include "transport/waiter.h"

#include <sched.h>
#include <time.h>

namespace ring {
namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

}  // namespace

void Backoff::wait() {
  if (!idle_since_valid_) {
    idle_since_valid_ = true;
    idle_since_ = Clock::now();
    idle_iterations_ = 0;
  }
  ++idle_iterations_;
  double idle_us = std::chrono::duration<double, std::micro>(Clock::now() - idle_since_).count();
  if (idle_us < 20) {
    for (int i = 0; i < 32; ++i) cpu_relax();
  } else if (idle_us < 500) {
    sched_yield();
  } else {
    // Sleep about a tenth of the time already waited: short waits stay
    // responsive, long waits cost almost nothing.
    long ns = static_cast<long>(idle_us * 100.0);
    if (ns > 1000000) ns = 1000000;
    timespec ts{0, ns};
    nanosleep(&ts, nullptr);
  }
}

double Backoff::idle_seconds() const {
  if (!idle_since_valid_) return 0.0;
  return std::chrono::duration<double>(Clock::now() - idle_since_).count();
}

}  // namespace ring
