// AeadChannel: a Channel that encrypts and authenticates everything it
// carries (RING_ENCRYPT=1 on TCP links), over an inner channel.
//
// Wire format, per frame: plaintext length n (u32 LE) | n bytes of
// AES-256-GCM ciphertext | 16-byte tag. The tag covers the ciphertext and
// the length; the nonce is the frame's number in its direction (never
// sent), so a frame that is altered, dropped, reordered or replayed fails
// its tag and the channel raises PeerFailure ("failed authentication")
// instead of delivering a byte. Keys come from the connection's handshake
// (Handshake::session_keys), one per direction.
//
// Writes keep Channel's contract exactly: try_write() reports bytes as
// accepted only once their whole frame has gone to the inner channel, so a
// caller that stops writing never leaves bytes stranded in this object; it
// re-offers the same bytes until they are accepted (as the Mesh does).
#pragma once

#include <memory>
#include <vector>

#include "transport/aes_gcm.h"
#include "transport/channel.h"

namespace ring {

class AeadChannel : public Channel {
 public:
  // Plaintext bytes per frame at most: small enough that a whole frame
  // usually sits in the TCP channel's receive stage and is decrypted from
  // there without a copy.
  static constexpr size_t kFrameBytes = 64 << 10;

  AeadChannel(std::unique_ptr<Channel> inner, const std::vector<uint8_t>& send_key,
              const std::vector<uint8_t>& recv_key);

  size_t try_write(const uint8_t* buf, size_t len) override;
  std::pair<const uint8_t*, size_t> peek(size_t max) override;
  void consume(size_t n) override;
  int fd() const override { return inner_->fd(); }
  void check_alive() override { inner_->check_alive(); }
  void set_dead_link_timeout(double seconds) override { inner_->set_dead_link_timeout(seconds); }
  void close() override { inner_->close(); }

 private:
  // Sends what is left of the pending frame; true when none is left.
  bool flush();
  // Reads from the inner channel; decrypts a whole frame into plain_ when
  // one is there (straight from the inner channel's memory when it holds
  // the whole frame, else gathered in in_ first).
  void fill();
  // Authenticates and decrypts the frame at `frame` into plain_.
  void open_frame(const uint8_t* frame);

  std::unique_ptr<Channel> inner_;
  AesGcm sealer_, opener_;
  uint64_t sent_frames_ = 0, received_frames_ = 0;
  std::vector<uint8_t> out_;  // the frame being sent
  size_t out_sent_ = 0;
  size_t out_plain_ = 0;  // plaintext bytes it carries (reported when sent)
  std::vector<uint8_t> in_;  // a frame being received
  std::vector<uint8_t> plain_;  // the last frame's plaintext
  size_t plain_begin_ = 0;
};

}  // namespace ring
