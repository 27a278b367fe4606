#include "transport/aes_gcm.h"

#include <dlfcn.h>

#include <cstring>
#include <mutex>
#include <string>

#include "common/error.h"

namespace ring {
namespace {

// The few libcrypto entry points used, declared here (no OpenSSL headers).
struct Crypto {
  void* (*ctx_new)();
  void (*ctx_free)(void*);
  const void* (*aes_256_gcm)();
  int (*encrypt_init)(void*, const void*, void*, const unsigned char*, const unsigned char*);
  int (*decrypt_init)(void*, const void*, void*, const unsigned char*, const unsigned char*);
  int (*encrypt_update)(void*, unsigned char*, int*, const unsigned char*, int);
  int (*decrypt_update)(void*, unsigned char*, int*, const unsigned char*, int);
  int (*encrypt_final)(void*, unsigned char*, int*);
  int (*decrypt_final)(void*, unsigned char*, int*);
  int (*ctrl)(void*, int, int, void*);
  std::string error;  // why loading failed; empty when loaded
};

constexpr int kCtrlSetIvLen = 0x9;  // EVP_CTRL_GCM_SET_IVLEN
constexpr int kCtrlGetTag = 0x10;   // EVP_CTRL_GCM_GET_TAG
constexpr int kCtrlSetTag = 0x11;   // EVP_CTRL_GCM_SET_TAG
constexpr int kNonceBytes = 12;
// EVP updates take int lengths: larger inputs go through in pieces.
constexpr size_t kMaxUpdate = size_t(1) << 30;

template <class F>
bool bind(void* lib, const char* name, F* fn) {
  *fn = reinterpret_cast<F>(dlsym(lib, name));
  return *fn != nullptr;
}

Crypto load() {
  Crypto c{};
  void* lib = nullptr;
  for (const char* name : {"libcrypto.so.3", "libcrypto.so"})
    if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL))) break;
  if (!lib) {
    c.error = "encrypted links (RING_ENCRYPT=1) need OpenSSL's libcrypto (libcrypto.so.3 or libcrypto.so), "
              "which could not be loaded";
    return c;
  }
  bool ok = bind(lib, "EVP_CIPHER_CTX_new", &c.ctx_new) && bind(lib, "EVP_CIPHER_CTX_free", &c.ctx_free) &&
            bind(lib, "EVP_aes_256_gcm", &c.aes_256_gcm) && bind(lib, "EVP_EncryptInit_ex", &c.encrypt_init) &&
            bind(lib, "EVP_DecryptInit_ex", &c.decrypt_init) && bind(lib, "EVP_EncryptUpdate", &c.encrypt_update) &&
            bind(lib, "EVP_DecryptUpdate", &c.decrypt_update) && bind(lib, "EVP_EncryptFinal_ex", &c.encrypt_final) &&
            bind(lib, "EVP_DecryptFinal_ex", &c.decrypt_final) && bind(lib, "EVP_CIPHER_CTX_ctrl", &c.ctrl);
  if (!ok) c.error = "the libcrypto found lacks the EVP AES-GCM functions encrypted links need";
  return c;
}

const Crypto& crypto() {
  static const Crypto c = load();
  return c;
}

void nonce(uint64_t counter, unsigned char* out) {
  std::memset(out, 0, kNonceBytes);
  for (int i = 0; i < 8; ++i) out[4 + i] = static_cast<unsigned char>(counter >> (8 * i));
}

void check(bool ok, const char* what) {
  if (!ok) throw_error(ErrorKind::Internal, std::string("AES-GCM: ") + what + " failed");
}

}  // namespace

bool AesGcm::available() { return crypto().error.empty(); }

AesGcm::AesGcm(const std::vector<uint8_t>& key) {
  const Crypto& c = crypto();
  if (!c.error.empty()) throw_error(ErrorKind::BadArgument, c.error);
  if (key.size() != kKeyBytes) throw_error(ErrorKind::Internal, "AES-GCM: the key must be 32 bytes");
  enc_ = c.ctx_new();
  dec_ = c.ctx_new();
  check(enc_ && dec_, "EVP_CIPHER_CTX_new");
  check(c.encrypt_init(enc_, c.aes_256_gcm(), nullptr, nullptr, nullptr) == 1 &&
            c.ctrl(enc_, kCtrlSetIvLen, kNonceBytes, nullptr) == 1 &&
            c.encrypt_init(enc_, nullptr, nullptr, key.data(), nullptr) == 1,
        "encryption setup");
  check(c.decrypt_init(dec_, c.aes_256_gcm(), nullptr, nullptr, nullptr) == 1 &&
            c.ctrl(dec_, kCtrlSetIvLen, kNonceBytes, nullptr) == 1 &&
            c.decrypt_init(dec_, nullptr, nullptr, key.data(), nullptr) == 1,
        "decryption setup");
}

AesGcm::~AesGcm() {
  if (enc_) crypto().ctx_free(enc_);
  if (dec_) crypto().ctx_free(dec_);
}

void AesGcm::seal(uint64_t counter, const uint8_t* aad, size_t aad_len, const uint8_t* in, size_t len,
                  uint8_t* out, uint8_t* tag) {
  const Crypto& c = crypto();
  unsigned char iv[kNonceBytes];
  nonce(counter, iv);
  int n = 0;
  check(c.encrypt_init(enc_, nullptr, nullptr, nullptr, iv) == 1, "EncryptInit");
  check(c.encrypt_update(enc_, nullptr, &n, aad, static_cast<int>(aad_len)) == 1, "EncryptUpdate (aad)");
  for (size_t done = 0; done < len; done += kMaxUpdate) {
    const int piece = static_cast<int>(std::min(kMaxUpdate, len - done));
    check(c.encrypt_update(enc_, out + done, &n, in + done, piece) == 1 && n == piece, "EncryptUpdate");
  }
  check(c.encrypt_final(enc_, out + len, &n) == 1, "EncryptFinal");
  check(c.ctrl(enc_, kCtrlGetTag, static_cast<int>(kTagBytes), tag) == 1, "GET_TAG");
}

bool AesGcm::open(uint64_t counter, const uint8_t* aad, size_t aad_len, const uint8_t* in, size_t len,
                  uint8_t* out, const uint8_t* tag) {
  const Crypto& c = crypto();
  unsigned char iv[kNonceBytes];
  nonce(counter, iv);
  int n = 0;
  check(c.decrypt_init(dec_, nullptr, nullptr, nullptr, iv) == 1, "DecryptInit");
  check(c.decrypt_update(dec_, nullptr, &n, aad, static_cast<int>(aad_len)) == 1, "DecryptUpdate (aad)");
  for (size_t done = 0; done < len; done += kMaxUpdate) {
    const int piece = static_cast<int>(std::min(kMaxUpdate, len - done));
    check(c.decrypt_update(dec_, out + done, &n, in + done, piece) == 1 && n == piece, "DecryptUpdate");
  }
  check(c.ctrl(dec_, kCtrlSetTag, static_cast<int>(kTagBytes), const_cast<uint8_t*>(tag)) == 1, "SET_TAG");
  return c.decrypt_final(dec_, out + len, &n) == 1;
}

}  // namespace ring
