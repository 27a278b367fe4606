// A Channel is a bidirectional byte stream between this rank and one peer.
//
// Channels never block: the Mesh drives them from one thread with a progress
// loop and decides how to wait. Two implementations exist: shared memory
// (ShmChannel, peers on the same host) and TCP (TcpChannel, any peer).
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

namespace ring {

struct Doorbell;

// A run of bytes to send; a message may be a list of them (a gather send).
struct Piece {
  const uint8_t* data;
  size_t len;
};

class Channel {
 public:
  virtual ~Channel() = default;

  // Copies up to `len` bytes from `buf` into the channel. Never blocks;
  // returns the number of bytes accepted (0 when the channel is full).
  // Throws RingError(PeerFailure) when the peer is gone.
  virtual size_t try_write(const uint8_t* buf, size_t len) = 0;

  // try_write() of the concatenation of `count` pieces (each non-empty):
  // returns how many of their bytes, from the front, were accepted. The
  // default writes them one by one; a channel may take them in one go.
  virtual size_t try_write_pieces(const Piece* pieces, size_t count) {
    size_t total = 0;
    for (size_t i = 0; i < count; ++i) {
      const size_t n = try_write(pieces[i].data, pieces[i].len);
      total += n;
      if (n < pieces[i].len) break;
    }
    return total;
  }

  // Returns a span of received, not yet consumed bytes, at most `max` long;
  // {nullptr, 0} when none are available. Never blocks. The span stays valid
  // and unchanged until the next consume() or peek(). The channel owns the
  // memory. Throws RingError(PeerFailure) when the peer is gone and no bytes
  // remain.
  virtual std::pair<const uint8_t*, size_t> peek(size_t max) = 0;

  // Releases the first `n` bytes of the last peek() span (n <= its length).
  virtual void consume(size_t n) = 0;

  // A file descriptor that poll() reports readable/writable when progress is
  // possible, or -1 when the channel has none (shared memory).
  virtual int fd() const { return -1; }

  // The doorbell (doorbell.h) the peer rings when this channel may progress
  // (shared memory: this rank's segment's), or null when it has none.
  virtual Doorbell* doorbell() { return nullptr; }

  // False when a try_write() now would certainly accept nothing (the
  // channel is full). Never blocks, never throws.
  virtual bool writable() { return true; }

  // Throws RingError(PeerFailure) when the peer is known to be dead (process
  // gone, socket closed). Cheap enough to call every few milliseconds.
  virtual void check_alive() {}

  // Closes the channel in both directions: the peer reads what was already
  // sent, then gets PeerFailure; its writes fail too. Idempotent, never throws.
  virtual void close() = 0;

  // A peer process seen stopped (SIGSTOP, a debugger) for longer than this
  // many seconds is PeerFailure in check_alive(), where the channel can
  // see the peer's process state (shared memory); 0: never. Set by the Mesh
  // to its timeout.
  double stopped_peer_limit_s = 0;

  // A peer host that stops answering (a cut link, a frozen machine) makes
  // check_alive() throw RingError(PeerFailure) about `seconds` after the
  // last thing it acknowledged, even while the channel is idle (TCP:
  // keepalive probes and TCP_USER_TIMEOUT). Set by the Mesh to its timeout.
  virtual void set_dead_link_timeout(double seconds) { (void)seconds; }

  // Bytes of the stream so far in each direction, kept by the Mesh (which
  // aligns large messages on it; see Mesh::sendrecv_sink).
  uint64_t stream_out = 0;
  uint64_t stream_in = 0;
};

}  // namespace ring
