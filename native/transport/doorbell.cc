#include "transport/doorbell.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <climits>

namespace ring {
namespace {

// The word is in memory shared between processes: no FUTEX_PRIVATE_FLAG.
long futex(std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout) {
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t), "a futex is a plain 32-bit word");
  return ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr, 0);
}

}  // namespace

void ring_doorbell(Doorbell* bell) {
  if (!bell) return;
  // Orders the caller's store before the sleepers load (the waiter orders
  // its sleepers increment before its readiness check the same way).
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (bell->sleepers.load(std::memory_order_relaxed) == 0) return;
  bell->seq.fetch_add(1, std::memory_order_seq_cst);
  futex(&bell->seq, FUTEX_WAKE, INT_MAX, nullptr);
}

bool sleep_on_doorbell(Doorbell* bell, double timeout_s, const std::function<bool()>& ready) {
  struct Sleeper {  // registered for the scope, also when ready() throws
    explicit Sleeper(Doorbell* b) : bell(b) { bell->sleepers.fetch_add(1, std::memory_order_seq_cst); }
    ~Sleeper() { bell->sleepers.fetch_sub(1, std::memory_order_relaxed); }
    Doorbell* bell;
  };
  const uint32_t seen = bell->seq.load(std::memory_order_acquire);
  Sleeper sleeper(bell);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (ready()) return true;
  const long ns = static_cast<long>(timeout_s * 1e9);
  const timespec timeout{ns / 1000000000L, ns % 1000000000L};
  // Returns at once when seq moved since `seen` (a ring we would miss otherwise).
  return futex(&bell->seq, FUTEX_WAIT, seen, &timeout) == 0 || errno != ETIMEDOUT;
}

}  // namespace ring
