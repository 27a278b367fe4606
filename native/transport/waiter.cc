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

namespace {

// Hex digits (lowest CPUs last) as the set of CPUs; empty for "".
std::vector<bool> cpus_in(const std::string& mask) {
  std::vector<bool> cpus;
  for (auto it = mask.rbegin(); it != mask.rend(); ++it) {
    const char c = *it;
    const int v = c >= '0' && c <= '9' ? c - '0' : (c >= 'a' && c <= 'f' ? c - 'a' + 10 : 0);
    for (int bit = 0; bit < 4; ++bit) cpus.push_back((v >> bit) & 1);
  }
  return cpus;
}

}  // namespace

std::string affinity_mask() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return "";
  static const char kDigits[] = "0123456789abcdef";
  std::string mask;
  for (int base = 0; base < CPU_SETSIZE; base += 4) {
    int v = 0;
    for (int bit = 0; bit < 4; ++bit) v |= CPU_ISSET(base + bit, &set) ? 1 << bit : 0;
    mask.insert(mask.begin(), kDigits[v]);
  }
  const size_t first = mask.find_first_not_of('0');
  return first == std::string::npos ? "" : mask.substr(first);
}

double cpus_of_rank(const std::string& mine, const std::vector<std::string>& local) {
  const int ranks = std::max<int>(1, static_cast<int>(local.size()));
  if (mine.empty()) return cpus_per_rank(ranks);
  std::vector<int> users;  // per CPU: how many local ranks may run on it
  for (const std::string& mask : local) {
    if (mask.empty()) return cpus_per_rank(ranks);
    std::vector<bool> cpus = cpus_in(mask);
    if (users.size() < cpus.size()) users.resize(cpus.size(), 0);
    for (size_t c = 0; c < cpus.size(); ++c) users[c] += cpus[c];
  }
  int covered = 0, own = 0;
  bool disjoint = true;
  std::vector<bool> me = cpus_in(mine);
  for (size_t c = 0; c < users.size(); ++c) {
    covered += users[c] > 0;
    disjoint &= users[c] <= 1;
    own += c < me.size() && me[c];
  }
  if (covered == 0) return cpus_per_rank(ranks);
  return disjoint ? static_cast<double>(own) : static_cast<double>(covered) / ranks;
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
