// The mutual authentication every TCP connection runs before anything else
// is read from it. Both sides prove they know the job secret without sending
// it, over fresh nonces from both sides, so a recorded transcript cannot be
// replayed and a stranger learns nothing useful.
//
//   connector -> acceptor  Hello   (48 B): "RING1", version, reserved[2],
//                                  connector rank, acceptor rank (u32 LE),
//                                  connector nonce[32]
//   acceptor  -> connector Reply   (64 B): acceptor nonce[32],
//                                  HMAC(secret, "acceptor"  | transcript)
//   connector -> acceptor  Proof   (32 B): HMAC(secret, "connector" | transcript)
//   acceptor  -> connector Ack     (1 B):  'K'
//
// transcript = "RING1" | version | connector rank | acceptor rank (u32 LE)
//              | connector nonce | acceptor nonce.
// The labels keep a MAC from one role being reflected as the other's. The
// Ack tells the connector its connection was kept, so it never mistakes a
// dropped connection for an established one. Frames have fixed sizes and are
// read exactly, so no byte after the handshake is swallowed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace ring {

// The acceptor's limit for a connection to complete the handshake, so a
// silent stranger cannot hold a slot forever.
constexpr double kHandshakeTimeoutSeconds = 5.0;

// Why one connection was refused. The builder drops that connection and
// keeps going; it never reaches the user as is.
class HandshakeError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Fills `buf` from the kernel's CSPRNG (getrandom, /dev/urandom fallback).
// Throws RingError(Internal) if neither is available.
void random_bytes(void* buf, size_t len);

// One side of the handshake as a state machine. The protocol part
// (take_output / expected_input / on_input) moves no bytes itself, so tests
// can run and record it in memory; advance() drives it on a socket.
class Handshake {
 public:
  static constexpr size_t kHelloBytes = 48;
  static constexpr size_t kReplyBytes = 64;
  static constexpr size_t kProofBytes = 32;
  static constexpr size_t kAckBytes = 1;

  // The side that dialed: this rank `my_rank` connects to `peer_rank`.
  static Handshake connector(const std::string& secret, int my_rank, int peer_rank);
  // The side that accepted: any rank in (my_rank, size) may be dialing.
  static Handshake acceptor(const std::string& secret, int my_rank, int size);

  // Bytes to send now (the caller must send all of them, in order).
  std::vector<uint8_t> take_output();
  // Size of the next frame to receive; 0 once nothing more is expected.
  size_t expected_input() const { return expected_; }
  // Consumes exactly expected_input() bytes. Throws HandshakeError when the
  // frame is malformed or does not authenticate.
  void on_input(const uint8_t* frame);
  // Authenticated, and nothing is left to send or receive.
  bool done() const { return expected_ == 0 && out_.size() == out_sent_; }
  // The authenticated peer (for the acceptor, known after the Hello).
  int peer_rank() const { return peer_rank_; }

  // Once done(): this connection's keys for encrypted traffic
  // (transport/aead_channel.h), HMAC(secret, direction label | transcript):
  // each connection and each direction has its own, known only to the two
  // ranks that ran this handshake.
  struct SessionKeys {
    std::vector<uint8_t> send, recv;
  };
  SessionKeys session_keys() const;

  // Moves bytes on a non-blocking socket until it would block. Returns
  // done(). Throws HandshakeError on failure, including EOF.
  bool advance(int fd);
  // POLLOUT while output is pending, else POLLIN.
  short poll_events() const;

 private:
  Handshake() = default;
  std::vector<uint8_t> transcript() const;
  std::vector<uint8_t> mac(const char* label) const;
  void on_hello(const uint8_t* frame);
  void on_reply(const uint8_t* frame);
  void on_proof(const uint8_t* frame);

  enum class Frame { Hello, Reply, Proof, Ack, None };
  Frame awaiting_ = Frame::None;   // the frame expected next
  bool is_connector_ = false;
  std::string secret_;
  int my_rank_ = -1;
  int size_ = 0;
  int peer_rank_ = -1;
  uint8_t nonce_c_[32] = {};
  uint8_t nonce_a_[32] = {};
  size_t expected_ = 0;            // bytes of the frame being received
  std::vector<uint8_t> in_;        // that frame, as far as received
  std::vector<uint8_t> out_;       // pending output
  size_t out_sent_ = 0;            // of out_, already on the wire
};

// Runs `hs` on `fd` (non-blocking) until done, polling; throws
// HandshakeError on failure or when `timeout_s` passes.
void run_handshake(Handshake& hs, int fd, double timeout_s);

}  // namespace ring
