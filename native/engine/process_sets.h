// ProcessSetTable: the process sets of a job, as Horovod has them: sets of
// global ranks that run collectives among themselves, each its own ring.
//
// Set 0 is every rank and always exists. Others are added and removed by
// the front end (collectively, after the ranks agreed on them), from any
// thread while the engine runs; readers hold a shared_ptr to the set they
// look up, so a set removed meanwhile stays valid for them.
//
// Negotiation: the coordinator counts a tensor of set S ready once every
// member of S submitted it, and fuses only tensors of the same set. A
// tensor's name is qualified by its set (qualified_name), so the same name
// may be in flight in two sets at once. Execution: every rank runs the
// responses in the one order rank 0 sent, skipping those of sets it is not
// in; since each pair of ranks sees the responses they share in the same
// order, sets that overlap cannot deadlock.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "transport/mesh.h"

namespace ring {

struct ProcessSet {
  int32_t id = 0;
  std::vector<int> ranks;      // global ranks, ascending
  std::unique_ptr<Mesh> mesh;  // this rank's subgroup of the data mesh; null when not a member (or id 0)
  // Distinct for every set added in this process's life (0: the global
  // set): what a backend keys state kept per set by, since an id may be
  // used again after remove().
  uint64_t serial = 0;

  // The index of global rank `r` in the set, or -1.
  int index_of(int r) const;
  bool contains(int r) const { return index_of(r) >= 0; }
  int size() const { return static_cast<int>(ranks.size()); }
};

// The name a tensor of set `id` travels under (set 0: the name itself).
std::string qualified_name(const std::string& name, int32_t id);

class ProcessSetTable {
 public:
  explicit ProcessSetTable(int world_size);

  // Adds set `id` over `ranks` (checked: distinct, in range, not empty,
  // ascending after sorting); `mesh` is this rank's subgroup or null.
  // Throws BadArgument for id 0, an id in use, or bad ranks.
  void add(int32_t id, std::vector<int> ranks, std::unique_ptr<Mesh> mesh);
  // Throws BadArgument for id 0; false when no such set.
  bool remove(int32_t id);
  // Null when no set has this id.
  std::shared_ptr<const ProcessSet> find(int32_t id) const;
  // Ranks checked as add() checks them, sorted.
  std::vector<int> checked_ranks(std::vector<int> ranks) const;

 private:
  int world_size_;
  mutable std::mutex mu_;
  std::unordered_map<int32_t, std::shared_ptr<const ProcessSet>> sets_;
  uint64_t last_serial_ = 0;  // guarded by mu_
};

}  // namespace ring
