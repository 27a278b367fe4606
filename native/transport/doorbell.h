// Doorbell: how a rank blocked on shared-memory channels sleeps until a
// peer moves bytes for it, instead of spinning or sleeping blind (an
// eventcount on a futex in shared memory).
//
// Each shared-memory segment holds its owner's doorbell. A peer rings it
// after every change that may let the owner progress: bytes published into
// one of the owner's rings, space freed in a ring the owner writes, a
// channel closed. Ringing costs one fence and one load of a line that is
// written only while someone sleeps; the futex wake happens only then.
//
// The waiter registers as a sleeper, then checks once more whether it can
// progress (`ready`), and only then sleeps: with the fences on both sides,
// either the ringer sees the sleeper or the waiter's check sees the bytes,
// so no wake-up is lost.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>

namespace ring {

struct Doorbell {
  std::atomic<uint32_t> seq{0};       // bumped by a ringer that saw sleepers
  std::atomic<uint32_t> sleepers{0};  // waiters between registering and waking
};

// Wakes whoever sleeps on `bell` (null: nothing). Call after the release
// store that made progress possible.
void ring_doorbell(Doorbell* bell);

// Sleeps on `bell` for at most `timeout_s` unless `ready()` (checked after
// registering as a sleeper) says progress is possible now. Returns early on
// a ring, a signal or a spurious wake-up (the caller checks again); false
// only when the whole timeout passed without one.
bool sleep_on_doorbell(Doorbell* bell, double timeout_s, const std::function<bool()>& ready);

}  // namespace ring
