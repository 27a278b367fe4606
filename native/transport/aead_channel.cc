#include "transport/aead_channel.h"

#include <algorithm>
#include <cstring>

#include "common/error.h"

namespace ring {
namespace {

constexpr size_t kHeaderBytes = 4;

uint32_t read_u32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 | static_cast<uint32_t>(p[2]) << 16 |
         static_cast<uint32_t>(p[3]) << 24;
}

}  // namespace

AeadChannel::AeadChannel(std::unique_ptr<Channel> inner, const std::vector<uint8_t>& send_key,
                         const std::vector<uint8_t>& recv_key)
    : inner_(std::move(inner)), sealer_(send_key), opener_(recv_key) {}

bool AeadChannel::flush() {
  while (out_sent_ < out_.size()) {
    size_t n = inner_->try_write(out_.data() + out_sent_, out_.size() - out_sent_);
    if (n == 0) return false;
    out_sent_ += n;
  }
  return true;
}

size_t AeadChannel::try_write(const uint8_t* buf, size_t len) {
  if (out_plain_ == 0) {
    if (len == 0) return 0;
    const size_t n = std::min(len, kFrameBytes);
    out_.resize(kHeaderBytes + n + AesGcm::kTagBytes);
    for (int i = 0; i < 4; ++i) out_[i] = static_cast<uint8_t>(n >> (8 * i));
    sealer_.seal(sent_frames_++, out_.data(), kHeaderBytes, buf, n, out_.data() + kHeaderBytes,
                 out_.data() + kHeaderBytes + n);
    out_sent_ = 0;
    out_plain_ = n;
  } else if (len < out_plain_) {
    throw_error(ErrorKind::Internal, "AeadChannel: bytes not yet accepted were not offered again");
  }
  if (!flush()) return 0;
  const size_t accepted = out_plain_;
  out_plain_ = 0;
  return accepted;
}

void AeadChannel::open_frame(const uint8_t* frame) {
  const size_t n = read_u32(frame);
  plain_.resize(n);
  if (!opener_.open(received_frames_++, frame, kHeaderBytes, frame + kHeaderBytes, n, plain_.data(),
                    frame + kHeaderBytes + n))
    throw_error(ErrorKind::PeerFailure,
                "an encrypted frame from a peer failed authentication (tampered, replayed or out of order)");
  plain_begin_ = 0;
}

void AeadChannel::fill() {
  auto frame_bytes = [](const uint8_t* header) -> size_t {
    const uint32_t n = read_u32(header);
    if (n > kFrameBytes)
      throw_error(ErrorKind::PeerFailure, "an encrypted frame from a peer failed authentication (bad length)");
    return kHeaderBytes + n + AesGcm::kTagBytes;
  };
  if (in_.empty()) {  // the whole frame in the inner channel's memory: no copy
    auto [data, avail] = inner_->peek(SIZE_MAX);
    if (avail >= kHeaderBytes) {
      const size_t whole = frame_bytes(data);
      if (avail >= whole) {
        open_frame(data);
        inner_->consume(whole);
        return;
      }
    }
  }
  while (in_.size() < kHeaderBytes || in_.size() < frame_bytes(in_.data())) {
    const size_t want = in_.size() < kHeaderBytes ? kHeaderBytes - in_.size() : frame_bytes(in_.data()) - in_.size();
    auto [data, avail] = inner_->peek(want);
    if (avail == 0) return;
    in_.insert(in_.end(), data, data + avail);
    inner_->consume(avail);
  }
  open_frame(in_.data());
  in_.clear();
}

std::pair<const uint8_t*, size_t> AeadChannel::peek(size_t max) {
  if (out_plain_ != 0) flush();  // keep a pending frame moving while the caller reads
  if (plain_begin_ == plain_.size()) {
    plain_.clear();
    plain_begin_ = 0;
    fill();
  }
  const size_t avail = plain_.size() - plain_begin_;
  if (avail == 0) return {nullptr, 0};
  return {plain_.data() + plain_begin_, std::min(avail, max)};
}

void AeadChannel::consume(size_t n) { plain_begin_ += n; }

}  // namespace ring
