#include "transport/waiter.h"

#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>

namespace ring {
namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

std::atomic<bool> g_spin{true};

}  // namespace

void Backoff::set_spin(bool on) { g_spin.store(on, std::memory_order_relaxed); }

double cpus_per_rank(int local_size) {
  cpu_set_t set;
  CPU_ZERO(&set);
  int cpus = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 0;
  if (cpus <= 0) cpus = static_cast<int>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
  return static_cast<double>(cpus) / std::max(local_size, 1);
}

void Backoff::start_idle_clock() {
  if (idle_since_valid_) return;
  idle_since_valid_ = true;
  idle_since_ = Clock::now();
  idle_iterations_ = 0;
}

void Backoff::wait() {
  start_idle_clock();
  ++idle_iterations_;
  double idle_us = std::chrono::duration<double, std::micro>(Clock::now() - idle_since_).count();
  if (idle_us < 20 && g_spin.load(std::memory_order_relaxed)) {
    for (int i = 0; i < 4; ++i) cpu_relax();  // ~100 ns: a short spin keeps the wake-up latency low
  } else if (idle_us < kYieldSeconds * 1e6) {
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

bool Backoff::blocking_due() {
  start_idle_clock();
  return idle_seconds() >= kYieldSeconds;
}

double Backoff::idle_seconds() const {
  if (!idle_since_valid_) return 0.0;
  return std::chrono::duration<double>(Clock::now() - idle_since_).count();
}

}  // namespace ring
