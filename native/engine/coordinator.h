// Coordinator: rank 0's half of the negotiation protocol.
//
// It collects every rank's requests (full, or as response-cache bits), keeps
// a table of named tensors and which ranks have submitted them, and once a
// tensor is ready on every rank checks that the ranks agree in every field
// engine/request_fields.h says they must (operation, dtype, shape, ...) and
// turns it into a Response: an Execute, fused with other allreduces of the
// same fusion key (same_fusion_key) up to the fusion threshold, or an Error
// that names the tensor, the field and the ranks with their values
// (engine/agreement.h). Responses leave in the order tensors became ready,
// so every rank executes the same sequence. A shutdown request from
// any rank fails what can never complete and ends the job on every rank.
//
// Process sets (engine/process_sets.h): a tensor of set S is ready once
// every member of S submitted it; its response carries S, and fuses only
// with tensors of S. A tensor of a set rank 0 does not know, or submitted by
// a rank outside its set, becomes an Error response at once.
//
// Join (Horovod's hvd.join(), global set only): a rank that has run out of data joins; from
// then on allreduces need only the other ranks, and the joined rank adds
// zeros. Once every rank has joined, the join completes everywhere with the
// rank that joined last.
//
// Stalls: a tensor that some ranks submitted and others have not for a long
// time usually means the ranks took different paths through the program.
// stalled() lists such tensors with the ranks missing; fail_stalled() ends
// the job with an error naming them (the stall inspector in the runtime
// decides when).
//
// Agreed cached allreduces (coordinator_quick.cc): once the ranks' requests
// for a cached tensor of the global set have been validated and none has
// changed since, its cache bits are only counted, by cache id, without a
// table entry, a copy of each request or another validation; a tensor in
// that state that some rank submits differently (or while a rank has
// joined, or the timeline records) goes back through the table.
//
// The class is pure logic (no I/O; time is passed in), so it is unit-tested
// directly.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/message.h"
#include "engine/node_pool.h"
#include "engine/process_sets.h"
#include "engine/response_cache.h"
#include "engine/timeline.h"

namespace ring {

class Coordinator {
 public:
  Coordinator(int world_size, ResponseCache* cache, size_t fusion_threshold_bytes);

  // Resolves cache bits against `rank`'s cached signatures; records full
  // requests as that rank's new signatures. Throws RingError(Internal) for a
  // bit that names no cached tensor.
  void add(int rank, const RequestList& list);
  // timeline_us: when it arrived, on the timeline's clock (-1: now).
  void add_request(int rank, const Request& req, long long timeline_us = -1);
  // A request `rank` hands over whole (rank 0's own): counted as its cache
  // bit when it equals the request that rank last sent under a cached
  // name, else recorded as that rank's new signature and added as above.
  void add_local(int rank, const Request& req, long long timeline_us = -1);
  void request_shutdown(int rank);
  // Negotiation events go to `timeline` (null: none).
  void set_timeline(Timeline* timeline) { timeline_ = timeline; }
  void set_fusion_threshold(size_t bytes) { fusion_threshold_ = bytes; }
  // Allreduces of at least this many bytes are never fused: each starts as
  // soon as every rank has it, without waiting for a batch, since sharing
  // an operation saves it little (and on GPUs fusing it would cost a copy
  // into and out of the fusion buffer).
  void set_alone_bytes(size_t bytes) { alone_bytes_ = bytes; }
  // The job's process sets (must outlive the coordinator); null: only the
  // global set.
  void set_process_sets(const ProcessSetTable* sets) { sets_ = sets; }
  // How errors name each rank, e.g. "rank 1 (host-a, pid 4242)".
  void set_rank_names(std::vector<std::string> names) { rank_names_ = std::move(names); }

  using Clock = std::chrono::steady_clock;
  // Clock::now() to within a few milliseconds, at a fraction of its cost
  // (a tensor's age only matters to the stall inspector, in seconds).
  static Clock::time_point coarse_now();
  struct Stall {
    std::string name;
    std::vector<int> missing;  // ranks that have not submitted it
    double seconds;            // since the first rank submitted it
    const char* op;            // the collective (op_type_name), as the others submitted it
  };
  // Tensors submitted by some ranks and waiting for others for at least
  // `older_than` seconds at `now`, oldest first.
  std::vector<Stall> stalled(Clock::time_point now, double older_than) const;
  // Ends the job like a shutdown, but every unfinished tensor fails with a
  // Timeout error that says `reason`.
  void fail_stalled(const std::string& reason);

  // True when take() would return responses or a shutdown.
  bool has_work() const {
    return !ready_.empty() || !quick_ready_.empty() || shutdown_rank_ >= 0 || join_count_ == world_size_;
  }
  // True while more requests are expected to complete a batch: some tensor
  // is submitted by some ranks but not all, nothing forces a flush, the
  // ready allreduces do not fill the fusion threshold yet, and none of them
  // is large enough to run alone (it gains nothing from waiting).
  bool worth_waiting() const {
    return shutdown_rank_ < 0 && (table_.size() > ready_.size() || quick_open_.size() > quick_ready_.size()) &&
           ready_bytes_ < fusion_threshold_ && !ready_alone_;
  }
  // Ready tensors become responses; new cache entries are put into the
  // cache and listed in cache_puts.
  ResponseList take();


 private:
  struct Pending {
    std::vector<std::optional<Request>> by_rank;  // by global rank
    int count = 0;
    std::shared_ptr<const ProcessSet> set;  // null: unknown (see error)
    std::string error;                      // set at submission: fails the tensor
    bool ready = false;                     // listed in ready_
    Clock::time_point since = coarse_now();  // first submission
    Timeline::Row timeline_row;
    int64_t cache_id = -1;  // the name's response-cache id when it was tabled
    const Request& first() const;  // the lowest submitted rank's request
  };
  // An agreed cached tensor's bits (by cache id).
  struct Quick {
    std::vector<uint8_t> by_rank;  // 1: that rank's bit arrived
    int count = 0;
    bool agreed = false;  // every rank's signature validated, none changed since
    bool tabled = false;  // the name has a table_ entry: its requests go there
    bool ready = false;   // listed in quick_ready_
    Clock::time_point since;  // first bit
    // Ranks whose bit has not arrived.
    std::vector<int> missing() const;
    // No bit counted (taken, or failed).
    void clear();
  };
  void join(int rank);
  // The set `req` names, or null with `error` set (membership is checked
  // per submission, in add_request).
  std::shared_ptr<const ProcessSet> find_set(const Request& req, std::string* error) const;
  // Members of p's set that have neither submitted nor (global set) joined.
  std::vector<int> missing(const Pending& p) const;
  void mark_ready(const std::string& name, Pending& p);
  // Adds a ready tensor's bytes to ready_bytes_ (and notes one to run alone).
  void count_ready(const Request& q);
  bool complete(const Pending& p) const;
  // Checks agreement (engine/agreement.h); returns an error message or ""
  // when the ranks agree.
  std::string validate(const std::string& name, const Pending& p) const;
  // `first`: the lowest submitted rank's request; p: the table entry (null
  // for an agreed cached allreduce, which needs none).
  Response execute_response(const std::string& name, const Request& first, const Pending* p) const;
  Response error_response(const std::string& name, const Pending& p, const std::string& err) const;
  // The Join response once every rank has joined; resets the join state.
  Response join_response();
  // Gives `name` a response-cache id (listed in list.cache_puts) when every
  // rank submitted it and the cache has room.
  void cache(const std::string& name, const Pending& p, ResponseList& list);
  // The allreduce response of one fusion key that later ones may join.
  struct OpenFusion {
    const Request* key = nullptr;  // its first tensor's request
    size_t index = 0;              // in ResponseList::responses
    size_t bytes = 0;
  };
  // Appends `name`'s Execute response to list, or fuses it into the open
  // response of its fusion key (same_fusion_key) when that has room.
  void schedule(const std::string& name, const Request& q, const Pending* p, Timeline::Row row, ResponseList& list,
                std::vector<OpenFusion>& open) const;
  void fail_unfinished(ResponseList& list);
  // The error of a tensor the ranks in `missing_ranks` never submitted.
  Response unfinished_error(const std::string& name, const std::string& missing_ranks) const;

  // coordinator_quick.cc
  Quick& quick(uint32_t id);
  // Counts `rank`'s bit for agreed `id`, or adds its signature to the table.
  void add_cached(int rank, uint32_t id, long long timeline_us);
  // Moves id's counted bits into its new table entry p (a request for the
  // name is going through the table).
  void demote(uint32_t id, Pending& p);
  // After p's validation succeeded: whether its id is agreed from now on.
  void note_agreement(const Pending& p);
  // The ready agreed tensors become responses (after the table's).
  void take_quick(ResponseList& list, std::vector<OpenFusion>& open);
  void quick_stalls(Clock::time_point now, double older_than, std::vector<Stall>& out) const;
  // Fails the counted tensors that never completed (the job is ending).
  void fail_quick(ResponseList& list);
  std::vector<Quick> quick_;             // by cache id
  std::vector<uint32_t> quick_open_;     // ids with bits counted, first bit first
  std::vector<uint32_t> quick_ready_;    // complete ids, in the order they completed

  int world_size_;
  std::shared_ptr<const ProcessSet> global_;  // every rank
  const ProcessSetTable* sets_ = nullptr;
  ResponseCache* cache_;
  size_t fusion_threshold_;
  size_t alone_bytes_ = SIZE_MAX;
  std::unordered_map<std::string, Pending> table_;
  // Nodes of taken tensors, kept (emptied, their by_rank rows allocated)
  // for the next tensors: a tensor then costs no node or row allocation.
  NodePool<std::unordered_map<std::string, Pending>> spare_;
  // table_'s entry for a tensor seen for the first time.
  std::unordered_map<std::string, Pending>::iterator insert_pending(const std::string& name);
  // insert_pending() for a tensor seen for the first time, listed as
  // arriving now, holding the bits counted so far for `cache_id` (-1: not
  // cached). The caller sets its process set.
  std::unordered_map<std::string, Pending>::iterator open_entry(const std::string& name, int64_t cache_id);
  // add_request() for a request whose name has response-cache id
  // `cache_id` (-1: none), which the caller already looked up.
  void add_known(int rank, const Request& req, long long timeline_us, int64_t cache_id);
  // Removes a taken tensor's entry, keeping its node in spare_.
  void retire_pending(const std::string& name);
  std::deque<std::string> arrival_;  // names in first-seen order
  std::vector<std::string> ready_;   // in the order they became ready
  size_t ready_bytes_ = 0;
  bool ready_alone_ = false;  // a ready tensor of at least alone_bytes_
  int shutdown_rank_ = -1;
  std::string stall_reason_;  // set by fail_stalled
  Timeline* timeline_ = nullptr;
  std::vector<std::string> rank_names_;
  std::string rank_name(int rank) const;
  std::vector<bool> joined_;
  int join_count_ = 0;
  int last_joined_ = -1;
  std::string join_name_;
};

}  // namespace ring
