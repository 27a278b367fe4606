// Shared-memory transport for ranks on one host.
//
// Each rank creates ONE POSIX shared-memory segment per mesh,
// shm_segment_name(job_id, rank) = "/ring.<job_id>.<rank>",
// holding one single-producer/single-consumer byte ring per possible sender.
// Ring i of rank j's segment carries the bytes from rank i to rank j: rank j
// reads its own segment, rank i writes into j's. A rank thus maps its own
// segment plus one per local peer, and every ring has exactly one writer
// and one reader, so plain atomics suffice (no locks, no syscalls per call).
//
// Segment layout (offsets in bytes):
//   0                      SegmentHeader (magic, version, rank, size, pid, ring capacity)
//   kShmLine               Doorbell (the owner's: doorbell.h)
//   kPage                  RingHeader[size]: head | tail | closed+attached, each on its own 128-byte line
//   data_offset            ring data, one stride (capacity rounded up to a page) per sender
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "transport/channel.h"
#include "transport/doorbell.h"

namespace ring {

// 128 rather than 64: adjacent-line prefetchers pull cache lines in pairs,
// and head/tail ping-ponging between two cores must not share a pair.
constexpr size_t kShmLine = 128;

struct alignas(kShmLine) ShmRingHeader {
  alignas(kShmLine) std::atomic<uint64_t> head{0};  // bytes ever written; producer only
  alignas(kShmLine) std::atomic<uint64_t> tail{0};  // bytes ever consumed; consumer only
  alignas(kShmLine) std::atomic<uint32_t> closed{0};  // producer sets 1: nothing more will come
  std::atomic<uint32_t> attached{0};  // producer sets 1 once it has mapped the segment
};
static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared-memory rings need lock-free 64-bit atomics");

// The POSIX shared-memory name (as given to shm_open) of rank `rank`'s
// segment in the mesh whose MeshOptions::job_id is `job_id`. The one place
// the pattern is written; Python gets it through _native.shm_segment_names.
std::string shm_segment_name(const std::string& job_id, int rank);
// True when `job_id` may name shared memory: [A-Za-z0-9_-]{1,128}.
bool valid_job_id(const std::string& job_id);

// One mapped segment. Unmaps on destruction; never unlinks by itself (the
// MeshBuilder decides when the name goes away).
class ShmSegment {
 public:
  // Creates and initializes `name` (O_EXCL, mode 0600).
  // Throws RingError(Internal) naming the segment on failure, leaving no
  // name behind.
  static std::shared_ptr<ShmSegment> create(const std::string& name, int rank, int size, size_t ring_bytes);
  // Maps a peer's segment and checks that its header describes rank `rank`
  // of a job of `size` created by process `pid`. Throws RingError(PeerFailure)
  // when it cannot be opened or does not match.
  static std::shared_ptr<ShmSegment> open(const std::string& name, int rank, int size, int pid);
  ~ShmSegment();

  const std::string& name() const { return name_; }
  int pid() const;
  size_t ring_bytes() const;
  ShmRingHeader* ring(int sender) const;
  // The owner's doorbell: peers ring it when the owner may progress.
  Doorbell* doorbell() const;
  uint8_t* data(int sender) const;
  // shm_unlink()s the name once; mappings stay valid. Never throws.
  void unlink();

 private:
  ShmSegment(std::string name, void* base, size_t len) : name_(std::move(name)), base_(base), len_(len) {}
  std::string name_;
  void* base_;
  size_t len_;
  bool unlinked_ = false;
};

// Total segment size for `size` rings of `ring_bytes` each.
size_t shm_segment_bytes(int size, size_t ring_bytes);

class ShmChannel : public Channel {
 public:
  // `own` is this rank's segment, `peer` the segment of rank `peer_rank`.
  // Marks our ring in the peer's segment as attached, telling the peer it
  // may unlink the name.
  ShmChannel(std::shared_ptr<ShmSegment> own, std::shared_ptr<ShmSegment> peer, int my_rank, int peer_rank);

  // memcpy into the peer's ring (across its wrap point); 0 when full.
  // PeerFailure once the peer has closed its channel.
  size_t try_write(const uint8_t* buf, size_t len) override;
  // As many of the pieces as fit, across the wrap point, published with
  // one head store (and one doorbell ring).
  size_t try_write_pieces(const Piece* pieces, size_t count) override;
  // The contiguous readable part of our ring (up to the wrap point).
  std::pair<const uint8_t*, size_t> peek(size_t max) override;
  void consume(size_t n) override;
  // Peer process gone or a zombie, or closed with nothing left: PeerFailure.
  // (The pid is not watched when it was invisible at attach time, e.g. a
  // peer in another pid namespace.)
  void check_alive() override;
  // The peer has mapped our segment (and made its ShmChannel to us).
  bool peer_attached() const { return in_->attached.load(std::memory_order_acquire) != 0; }
  void close() override;
  // Our segment's doorbell; we ring the peer's after every head or tail
  // store and when closing.
  Doorbell* doorbell() override { return own_->doorbell(); }
  bool writable() override;

 private:
  [[noreturn]] void fail_closed();
  // Free bytes of the outgoing ring, reloading the peer's tail when fewer
  // than `wanted` look free. Throws when either side has closed.
  size_t space_for(size_t wanted);
  // Copies `len` bytes (at most the free space) at our head, across the
  // wrap point, without publishing them.
  void put(const uint8_t* buf, size_t len);
  // Publishes the bytes put so far and rings the peer.
  void publish();
  std::shared_ptr<ShmSegment> own_, peer_;
  int peer_pid_;
  std::optional<std::chrono::steady_clock::time_point> stopped_since_;  // peer seen stopped since
  bool closed_ = false;
  // Outgoing ring (in the peer's segment); we are its producer.
  ShmRingHeader* out_;
  uint8_t* out_data_;
  size_t out_cap_;
  uint64_t out_head_;        // our head (only we write it)
  uint64_t out_tail_seen_;   // last tail read; reloaded only when it looks full
  // Incoming ring (in our segment); we are its consumer.
  ShmRingHeader* in_;
  const uint8_t* in_data_;
  size_t in_cap_;
  uint64_t in_tail_;         // our tail (only we write it)
  uint64_t in_head_seen_;    // last head read; reloaded only when it looks empty
};

}  // namespace ring
