// The engine's one exception type. The binding maps each kind to a Python
// subclass of ring_strategy.RingError, so errors are defined once, here.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace ring {

enum class ErrorKind : int {
  Internal = 0,     // RingError: a bug or an unexpected system failure
  BadArgument = 1,  // BadArgumentError (also a ValueError in Python)
  Mismatch = 2,     // MismatchError: ranks disagree about a tensor
  PeerFailure = 3,  // PeerFailureError: a peer died or closed its connection
  Timeout = 4,      // RingTimeoutError: no progress within RING_TIMEOUT_SECONDS
  Shutdown = 5,     // ShutdownError: used before init() or after shutdown()
};
// One past the last kind: every table indexed by kind has this many rows.
constexpr int kNumErrorKinds = static_cast<int>(ErrorKind::Shutdown) + 1;
// True when `v` names an ErrorKind (a value read from a peer is checked first).
constexpr bool is_valid_error_kind(int64_t v) { return v >= 0 && v < kNumErrorKinds; }

class RingError : public std::runtime_error {
 public:
  RingError(ErrorKind kind, const std::string& what) : std::runtime_error(what), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

[[noreturn]] inline void throw_error(ErrorKind kind, const std::string& what) { throw RingError(kind, what); }

}  // namespace ring
