// AesGcm: AES-256-GCM from the system's OpenSSL libcrypto, loaded at run
// time (dlopen of libcrypto.so.3, then libcrypto.so), so the engine builds
// without OpenSSL headers and only jobs that encrypt need the library.
//
// One object per direction of a connection: a fixed 32-byte key, a 12-byte
// nonce made of a 64-bit frame counter (the caller's), and a 16-byte tag
// that authenticates the ciphertext and the associated data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ring {

class AesGcm {
 public:
  static constexpr size_t kKeyBytes = 32;
  static constexpr size_t kTagBytes = 16;

  // Throws RingError(BadArgument) naming the libraries tried when libcrypto
  // cannot be loaded, Internal for a key of the wrong size.
  explicit AesGcm(const std::vector<uint8_t>& key);
  ~AesGcm();
  AesGcm(const AesGcm&) = delete;
  AesGcm& operator=(const AesGcm&) = delete;

  // out[0, len) = ciphertext of in[0, len); tag[0, 16) authenticates it
  // with `aad` under nonce `counter`.
  void seal(uint64_t counter, const uint8_t* aad, size_t aad_len, const uint8_t* in, size_t len, uint8_t* out,
            uint8_t* tag);
  // The inverse; false (out unspecified) when the tag does not match.
  bool open(uint64_t counter, const uint8_t* aad, size_t aad_len, const uint8_t* in, size_t len, uint8_t* out,
            const uint8_t* tag);

  // True when libcrypto can be loaded here (for tests and --check-build).
  static bool available();

 private:
  void* enc_ = nullptr;  // EVP_CIPHER_CTX*, key set, nonce per frame
  void* dec_ = nullptr;
};

}  // namespace ring
