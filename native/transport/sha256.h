// SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), self-contained so the
// engine needs no crypto library. Used by the connection handshake only, so
// clarity wins over speed.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace ring {

using Digest = std::array<uint8_t, 32>;

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t len);
  void update(const std::string& s) { update(s.data(), s.size()); }
  // Pads and returns the digest; the object must not be used afterwards.
  Digest finish();

 private:
  void compress(const uint8_t block[64]);
  uint32_t state_[8];
  uint8_t block_[64];
  size_t block_len_ = 0;
  uint64_t total_len_ = 0;
};

Digest sha256(const void* data, size_t len);

// HMAC-SHA256 of `msg` under `key` (any length).
Digest hmac_sha256(const void* key, size_t key_len, const void* msg, size_t msg_len);
inline Digest hmac_sha256(const std::string& key, const std::string& msg) {
  return hmac_sha256(key.data(), key.size(), msg.data(), msg.size());
}

// Compares without an early exit, so the time taken does not reveal how
// many leading bytes of a forged MAC were right.
bool constant_time_equal(const uint8_t* a, const uint8_t* b, size_t len);

// Lower-case hex, for tests and logs.
std::string to_hex(const uint8_t* data, size_t len);
inline std::string to_hex(const Digest& d) { return to_hex(d.data(), d.size()); }

}  // namespace ring
