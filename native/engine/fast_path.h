// FastPath: one trip for agreed cached allreduces (RING_FAST_PATH).
//
// Negotiating through rank 0 costs a small allreduce three one-way trips
// even when the response cache knows it: the request to rank 0, rank 0's
// answer, the data. Once every rank has run an allreduce of the global set
// under a cached name with the same request (a validated Execute response
// of the negotiation: `agreed`), its next submissions skip rank 0: every
// rank sends every other rank one round message (engine/fast_round.h) with
// its data, and every rank decides from the same n messages which tensors
// run, reducing them itself in rank order (identical results on every
// rank). A small agreed allreduce is then one exchange.
//
// Rounds. Round r is one message from every rank to every other rank, on
// the control mesh (so it never interleaves with collective data). A rank
// sends its round-r message when its state changed (a tensor taken for the
// fast path, a change of no fast, a tensor a peer may wait for sent to the
// negotiation) or when a peer's round-r message arrived; once it holds all
// n it decides round r and moves to r+1. Messages of a link arrive in order
// and each rank sends one per round, so rounds line up without rank 0.
//
// What takes the fast path: allreduces of the global set in host memory,
// not Adasum, of at most tensor_bytes, whose cached name's request equals
// the agreed one, in a fresh batch whose such tensors fit round_bytes, on a
// rank that has not joined and sees no peer saying no fast. Everything else,
// and everything on a rank with the path off, goes through the negotiation
// as before.
//
// Falling back. A decision sends a tensor back to the negotiation on every
// rank that holds it when some rank sent it there (a changed shape, dtype,
// op or anything else), or when some rank says no fast: it has joined, or
// it is rank 0 recording a timeline. A tensor held for longer than
// `patience_s` without a round in flight also goes back (a rank that never
// submits it: rank 0's stall inspector then sees it). A join's completion
// forgets every agreement (allreduces during a join did not include the
// joined rank). An elastic reset starts a new engine and cache.
//
// Contract: the same options on every rank (the environment of the job).
// Not thread-safe: driven by the thread that steps the engine.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/fast_round.h"
#include "engine/handle_table.h"
#include "engine/message.h"
#include "engine/response_cache.h"
#include "engine/tensor_queue.h"
#include "transport/mesh.h"

namespace ring {

struct FastPathOptions {
  bool enabled = false;             // RING_FAST_PATH
  // The job's negotiated allreduces reduce in the ring's order
  // (collectives/allreduce_choice.h: ring_order, no hierarchical
  // allreduce). The path reduces in that order too, so a tensor's bits
  // never depend on which way it went; elsewhere it stays off.
  bool ring_order = true;
  size_t tensor_bytes = 8u << 10;   // largest tensor taken
  size_t round_bytes = 32u << 10;   // data of one rank's message at most
  double patience_s = 0.05;         // held this long, a tensor goes back
  int max_ranks = 8;                // n*(n-1) messages a round: small jobs only
  // A round some peer has not answered after this long ends the job with
  // RingError(Timeout) naming it, never a hang: RING_TIMEOUT_SECONDS, or
  // RING_STALL_SHUTDOWN_TIME_SECONDS when set and shorter (a rank stopped
  // mid-job is a stall to the user, as it is to the stall inspector).
  double answer_timeout_s = 30.0;
  // After this long (RING_STALL_CHECK_TIME_SECONDS; 0: never) a warning
  // names the ranks a round waits for, once per round.
  double warn_after_s = 60.0;
};

class FastPath {
 public:
  using PendingMap = std::unordered_map<std::string, Entry>;
  using Clock = std::chrono::steady_clock;

  // control: the control mesh (this rank's links to every rank). pending:
  // the runtime's operations in flight, where the held entries stay until
  // they run (completed through `handles`) or go back.
  FastPath(Mesh* control, const ResponseCache* cache, HandleTable* handles, PendingMap* pending,
           FastPathOptions opts);

  // Whether the path runs in this job (enabled, ring_order, 2..max_ranks ranks).
  bool on() const { return on_; }

  // Routing a fresh batch: begin_batch() with every entry of it, then
  // admit() for each in order. admit() true: the entry (already in
  // pending) is held for the fast path; false: it goes to the negotiation.
  void begin_batch(const std::vector<Entry>& fresh);
  bool admit(const Request& q, Clock::time_point now);

  // A round message from `peer` (FastMessage::is_fast), read by the runtime
  // from a link it reads itself. Throws RingError(Internal) for a message
  // of the wrong round.
  void receive(int peer, std::vector<uint8_t> msg);
  // After another rank left, before the runtime ends: finishes a round
  // this rank is in whose messages are still on their way (a rank that
  // finished the round and left sent them before it left, on other links
  // than the news), reading every link for them for at most `grace_s`.
  // Its operations complete as in step(); anything else read is dropped.
  void finish_before_end(double grace_s);
  // Reads the links the runtime does not: on a worker every worker's (rank
  // 0's is the runtime's), on rank 0 none. Heartbeats are skipped.
  void poll();
  // True when a link poll() reads has bytes waiting.
  bool readable();

  // Sends this rank's message when due and decides every complete round:
  // runs its Run tensors (completing their handles) and appends the
  // requests of the tensors that go back, and of those held past the
  // patience, to `back`, in order, for the negotiation. True when it moved
  // anything.
  bool step(Clock::time_point now, std::vector<Request>& back);

  // Before the runtime runs a response of the negotiation: notes the
  // agreements an Execute allreduce proves, forgets all at a Join.
  void note_response(const Response& r);
  // Rank 0 records a timeline: it says no fast while it does.
  void set_recording(bool recording);

 private:
  struct Held {
    std::string name;
    Clock::time_point since;
    uint32_t bytes = 0;
  };
  bool no_fast() const { return joined_ || recording_; }
  // Whether `q` is of the kind the path takes (before its agreement).
  bool eligible(const Request& q) const;
  // `name` (cache id `id`) goes to the negotiation on this rank.
  void note_slow(uint32_t id, const std::string& name);
  // Held `it` goes back: its request to `back`, its id noted slow.
  std::map<uint32_t, Held>::iterator give_back(std::map<uint32_t, Held>::iterator it, std::vector<Request>& back);
  Entry& entry_of(const std::string& name);
  void send_round();
  bool round_complete() const;
  bool peer_spoke() const;  // some peer's message of round_ is here
  void finish_round(std::vector<Request>& back);
  // Runs the tensors `ids` (ascending, all held) from the round's messages.
  void run(const std::vector<uint32_t>& ids, const std::vector<const FastMessage*>& msgs);
  bool expire(Clock::time_point now, std::vector<Request>& back);

  Mesh* control_;
  const ResponseCache* cache_;
  HandleTable* handles_;
  PendingMap* pending_;
  FastPathOptions opts_;
  int rank_, size_;
  bool on_;
  std::vector<std::unique_ptr<Request>> agreed_;  // by cache id
  std::map<uint32_t, Held> held_;                 // by cache id
  std::map<uint32_t, std::string> slow_;          // cached names pending in the negotiation
  bool batch_fits_ = true;
  bool joined_ = false, recording_ = false;
  bool peer_no_fast_ = false;                     // some peer said no fast in the last round
  std::vector<uint8_t> peer_waits_;               // by id: a peer held it in the last round
  uint64_t round_ = 0;
  bool sent_ = false;  // this rank's message of round_ is out
  Clock::time_point sent_at_{};
  bool warned_ = false;  // check_answered() warned of this round
  // Throws RingError(Timeout) when a peer left round_ unanswered too long.
  void check_answered(Clock::time_point now);
  bool dirty_ = false; // this rank's state changed since its last message
  FastMessage own_;
  std::vector<std::deque<FastMessage>> inbox_;  // by peer: its messages of round_, round_+1
};

}  // namespace ring
