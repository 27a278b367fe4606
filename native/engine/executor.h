// Executor: runs one Response on this rank. Every rank runs the same
// Responses in the same order, so the collectives line up.
//
// Allreduce fusion layout (why results never depend on what was fused):
// the ring splits its buffer into one chunk per rank, and the order in
// which an element is reduced depends on the chunk it falls in. So the
// fusion buffer is laid out chunk-major: chunk c holds slice c of every
// tensor (tensor T of N elements contributes elements [c*N/n, (c+1)*N/n)),
// which puts every element of T in the same chunk whatever else was fused
// with it. Results are bitwise identical across runs and across ranks.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/handle_table.h"
#include "engine/message.h"
#include "engine/tensor_queue.h"
#include "engine/timeline.h"
#include "transport/mesh.h"

namespace ring {

// Elements of slice c when `count` elements are split over n ranks.
size_t slice_count(size_t count, int n, int c);
size_t slice_offset(size_t count, int n, int c);

class Executor {
 public:
  Executor(Mesh* mesh, HandleTable* handles) : mesh_(mesh), handles_(handles) {}

  // Executes `r` for the entries named in it (taken out of `pending`) and
  // finishes their handles. Throws RingError only for transport failures.
  void run(const Response& r, std::unordered_map<std::string, Entry>& pending);

  // While this rank has joined, it adds zeros to allreduces it never submitted.
  void set_joined(bool joined) { joined_ = joined; }
  // Allreduces run hierarchically over these two subgroups of the mesh
  // (collectives.h: hierarchical_allreduce); null: flat ring.
  void set_hierarchy(std::unique_ptr<Mesh> local, std::unique_ptr<Mesh> cross) {
    local_ = std::move(local);
    cross_ = std::move(cross);
  }
  // Execution phases go to `timeline` (null: none).
  void set_timeline(Timeline* timeline) { timeline_ = timeline; }

 private:
  void run_response(const Response& r, std::unordered_map<std::string, Entry>& pending);
  // Entries' outputs are set; several entries are fused.
  void allreduce(std::vector<Entry>& entries);
  // The allreduce of `src` into `dst` (chunk layout `chunks` for the flat
  // ring), flat or hierarchical, inside its timeline phase.
  void reduce(const std::vector<Entry>& entries, const void* src, void* dst, const std::vector<size_t>& chunks,
              double post);
  // Runs a one-entry collective inside its timeline phase and finishes it.
  template <class Run>
  void collective(std::vector<Entry>& entries, Run run);
  OpResult allgather(Entry& e, const std::vector<int64_t>& first_dims);
  OpResult broadcast(Entry& e);
  OpResult alltoall(Entry& e, const std::vector<int64_t>& splits);
  OpResult reducescatter(Entry& e);
  // Output memory for `e`: the caller's, or a new engine-owned buffer.
  uint8_t* output_for(Entry& e, size_t bytes, OpResult& res);
  uint8_t* fusion(size_t bytes);
  // Closes the entries' operations in the timeline and completes their
  // handles with results[i].
  void finish_all(std::vector<Entry>& entries, std::vector<OpResult>& results);
  // Opens the operation on the timeline rows of the response's entries
  // (none when the timeline is off); phase_begin / phase_end then time an
  // inner phase (they do not nest) on all of them, finish_all closes it.
  void timeline_open(const std::vector<Entry>& entries, const Response& r);
  void phase_begin(const char* phase);
  void phase_end();
  // A zero-filled entry standing in for `name` (position i of response r).
  Entry stand_in(const Response& r, size_t i);

  Mesh* mesh_;
  HandleTable* handles_;
  std::vector<uint8_t> fusion_;
  bool joined_ = false;
  std::vector<std::vector<uint8_t>> stand_ins_;  // zero buffers of a joined rank
  Timeline* timeline_ = nullptr;
  std::unique_ptr<Mesh> local_, cross_;  // hierarchical allreduce
  std::vector<int> timeline_rows_;  // of the response running now
  const char* phase_ = "";          // its inner phase, since phase_began_
  long long phase_began_ = -1;
  std::vector<const std::string*> timeline_names_;  // scratch
  std::vector<const Request*> timeline_requests_;   // scratch
};

}  // namespace ring
