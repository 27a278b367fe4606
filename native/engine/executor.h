// Executor: runs one Response on this rank. Every rank runs the same
// Responses in the same order, so the collectives line up.
//
// A rank runs only the responses of process sets it is in: a response of
// another set names tensors it never submitted (names carry their set), and
// is skipped.
//
// It takes the response's entries out of this rank's pending operations,
// fails them for an Error response, and otherwise hands them to the first
// backend (engine/backend.h) enabled for the response. Which backends exist
// is decided once, before the first response, by the backend registry
// (backends/registry.h).
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/backend.h"
#include "engine/handle_table.h"
#include "engine/message.h"
#include "engine/node_pool.h"
#include "engine/tensor_queue.h"

namespace ring {

class Executor {
 public:
  explicit Executor(HandleTable* handles) : handles_(handles) {}

  // Backends are asked in the order they were added. Add them all before
  // the first run() or serves().
  void add_backend(std::unique_ptr<Backend> backend) { backends_.push_back(std::move(backend)); }
  // True when some backend serves `device` (thread-safe).
  bool serves(const Device& device) const;
  // Backend::abort of every backend.
  void abort() {
    for (const auto& b : backends_) b->abort();
  }
  // Backend::check of every backend.
  void check() {
    for (const auto& b : backends_) b->check();
  }
  // Backend::settle of every backend, within `timeout_seconds` in all.
  void settle(double timeout_seconds);
  // Backend::forget_set of every backend.
  void forget_set(uint64_t serial) {
    for (const auto& b : backends_) b->forget_set(serial);
  }
  // Backend::prepare of the first backend serving e.req.device (caller's
  // thread); false when none serves it.
  bool prepare(Entry& e, uint64_t stream);

  // Executes `r` for the entries named in it (taken out of `pending`) and
  // finishes their handles. Throws RingError for transport failures, and
  // RingError(Internal) when no backend is enabled for an Execute response.
  void run(const Response& r, std::unordered_map<std::string, Entry>& pending);

  // While this rank has joined, it adds zeros to allreduces it never
  // submitted; the Join response ends that.
  void set_joined(bool joined) { joined_ = joined; }

  using PendingMap = std::unordered_map<std::string, Entry>;
  // Nodes of `pending` whose entries run() took, for the next pending
  // entries: those then cost no allocation.
  NodePool<PendingMap>& spare_nodes() { return spare_; }

 private:
  void run_response(const Response& r, std::unordered_map<std::string, Entry>& pending);
  Backend& backend_for(const Response& r);
  // The entry standing in for names[i] of allreduce `r` on a joined rank
  // (handle 0: the backend supplies its zeros).
  static Entry stand_in(const Response& r, size_t i);

  HandleTable* handles_;
  std::vector<std::unique_ptr<Backend>> backends_;
  std::vector<Entry> entries_;  // of the response running now (reused)
  NodePool<PendingMap> spare_;  // see spare_nodes()
  bool joined_ = false;
};

}  // namespace ring
