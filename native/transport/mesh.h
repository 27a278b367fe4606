// Mesh: this rank's channels to every other rank, and the blocking
// point-to-point operations the collectives are written in.
//
// Every method except abort() must be called from one thread (the engine's
// background thread, or a test's rank thread). Blocking calls wait with a
// short spin, then yield, then block in the kernel: on the segment's
// doorbell (doorbell.h) when every channel involved is shared memory, in
// poll() when every one is a socket, in a backoff sleep otherwise; with
// more ranks than cores they skip the spin and yield, so ranks that
// outnumber cores do not starve each other. Peers that die or stall turn into RingError(PeerFailure) or
// RingError(Timeout) naming the peer rank; abort() from any thread turns
// every blocked or later call into RingError(PeerFailure) with its reason.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "transport/channel.h"

namespace ring {

class Backoff;
class RingError;
struct Doorbell;

class Mesh {
 public:
  // Receives bytes in order: `offset` counts from the start of the message.
  // `data` is valid only during the call.
  using Sink = std::function<void(const uint8_t* data, size_t offset, size_t len)>;

  // channels[r] is the channel to rank r; channels[rank] must be null.
  // peer_names[r] describes rank r in errors, e.g. "rank 1 (host-a, pid 4242)".
  Mesh(int rank, int size, std::vector<std::unique_ptr<Channel>> channels,
       std::vector<std::string> peer_names);
  ~Mesh();

  // A mesh over `members` (global ranks, this rank among them; rank i of the
  // subgroup is members[i]) sharing this mesh's channels, timeout and abort
  // state. It must not outlive this mesh, and is driven by the same thread.
  std::unique_ptr<Mesh> subgroup(const std::vector<int>& members);

  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::string& peer_name(int r) const { return peer_names_[r]; }
  // Whether the channel to rank r is a socket (TCP), not shared memory.
  bool is_socket(int r) const { return r != rank_ && channels_[r] && channels_[r]->fd() >= 0; }

  // `tick` runs about every `every_s` seconds while a sendrecv of this mesh
  // (or of a subgroup) is in progress, on the calling thread: work that
  // must go on during long transfers (heartbeats on another mesh).
  void set_tick(std::function<void()> tick, double every_s);

  // Seconds without any progress before a blocked call throws Timeout.
  // Also the limit for a peer process seen stopped (Channel::stopped_peer_limit_s)
  // and for a peer host that stops answering (Channel::set_dead_link_timeout).
  void set_timeout(double seconds) {
    timeout_s_ = seconds;
    for (auto& c : channels_)
      if (c) {
        c->stopped_peer_limit_s = seconds;
        c->set_dead_link_timeout(seconds);
      }
  }

  // Sends `slen` bytes to rank `to` while receiving exactly `rlen` bytes from
  // rank `from` into `rbuf`. Either side may be skipped with peer -1. Blocks
  // until both are done. `to` and `from` may be the same rank.
  void sendrecv(int to, const void* sbuf, size_t slen, int from, void* rbuf, size_t rlen);

  // Messages of at least kAlignBytes start at a multiple of kAlignBytes of
  // their stream (the sender pads with zeros, the receiver skips them: both
  // know the stream position), so that bulk data sits on cache-line
  // boundaries in shared memory whatever small messages went before.
  static constexpr size_t kAlignBytes = 64;
  static constexpr size_t kAlignFrom = 4096;

  // Like sendrecv, but hands the received bytes to `sink` instead of copying
  // them: pieces arrive in order and every piece's length is a multiple of
  // `granule` (only the last may be shorter, when rlen is not a multiple).
  // Used to reduce straight out of the transport's memory.
  void sendrecv_sink(int to, const void* sbuf, size_t slen, int from, size_t rlen, size_t granule,
                     const Sink& sink);
  // The same, sending the concatenation of `pieces` (a gather send: the
  // peer receives one message of their total length).
  void sendrecv_sink(int to, std::vector<Piece> pieces, int from, size_t rlen, size_t granule, const Sink& sink);

  void send(int to, const void* buf, size_t len) { sendrecv(to, buf, len, -1, nullptr, 0); }
  void recv(int from, void* buf, size_t len) { sendrecv(-1, nullptr, 0, from, buf, len); }

  // Length-prefixed messages (8-byte little-endian length, then payload).
  // recv_msg throws RingError(Internal) when the announced length exceeds
  // max_len, before allocating.
  void send_msg(int to, const std::vector<uint8_t>& msg);
  // Best effort, for a last word before leaving: sends `msg` like send_msg
  // if the peer takes it within `patience_s`; never throws. False when it
  // did not go out whole.
  bool post_msg(int to, const std::vector<uint8_t>& msg, double patience_s);
  std::vector<uint8_t> recv_msg(int from, size_t max_len);

  // Non-blocking: true when bytes from `from` are waiting to be received.
  // Throws RingError(PeerFailure) naming the peer when it is gone.
  bool readable(int from);
  // The doorbell (doorbell.h) every channel of this mesh rings (all shared
  // memory: this rank's segment's), or null (a socket among them).
  Doorbell* doorbell() const { return doorbell_; }
  // Throws RingError(PeerFailure) naming the peer when it is known dead.
  void check_alive(int peer);

  // Thread-safe. Every blocked and later call throws PeerFailure(reason).
  void abort(const std::string& reason);
  bool aborted() const {
    return aborted_.load(std::memory_order_acquire) || (parent_ && parent_->aborted());
  }

  // Closes every channel (idempotent; a subgroup leaves them to its parent).
  void close();

 private:
  Mesh(int rank, int size, std::vector<std::shared_ptr<Channel>> channels, std::vector<std::string> peer_names,
       Mesh* parent);
  std::string abort_reason() const;
  double timeout() const { return parent_ ? parent_->timeout() : timeout_s_; }
  class Transfer;  // one sendrecv_sink in progress (mesh.cc)
  // Throws RingError(Internal) unless the peers that move bytes have channels
  // and the granule is 1..16.
  void check_pair(int to, size_t slen, int from, size_t rlen, size_t granule) const;
  // Whether `peer` is another rank of this mesh with a channel.
  bool has_channel(int peer) const { return peer >= 0 && peer < size_ && peer != rank_ && channels_[peer]; }
  // Rethrows `e`, a PeerFailure as "lost <peer's name>: ..." (what a channel
  // of `peer` threw).
  [[noreturn]] void rethrow_naming(int peer, const RingError& e) const;
  // After an iteration of `t` that moved nothing: checks the peers are alive
  // (every kLivenessCheckSeconds), throws Timeout after timeout() without
  // progress, else waits a little (poll() when only sockets are involved).
  // `peer` is set while a channel of that peer is called.
  void wait_for_progress(const Transfer& t, int to, int from, Backoff& backoff, double& last_liveness, int& peer);

  int rank_;
  int size_;
  std::vector<std::shared_ptr<Channel>> channels_;
  Doorbell* doorbell_ = nullptr;  // common_doorbell(channels_), found at construction
  Mesh* parent_ = nullptr;
  std::vector<std::string> peer_names_;
  double timeout_s_ = 30.0;
  std::function<void()> tick_;
  double tick_every_s_ = 0.0;
  double next_tick_s_ = 0.0;  // steady seconds
  // Runs the root mesh's tick when it is due.
  void maybe_tick();
  std::atomic<bool> aborted_{false};
  mutable std::mutex abort_mu_;
  std::string abort_reason_;
};

}  // namespace ring
