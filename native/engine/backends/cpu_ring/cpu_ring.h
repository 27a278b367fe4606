// CpuRingBackend: executes responses on tensors in host memory with the
// ring collectives (collectives/collectives.h) over the job's data mesh.
// Serves DeviceType::CPU and every operation on it.
//
// Allreduce fusion layout (why results never depend on what was fused):
// the ring splits its buffer into one chunk per rank, and the order in
// which an element is reduced depends on the chunk it falls in. So fused
// tensors are laid out chunk-major: chunk c holds slice c of every tensor
// (tensor T of N elements contributes elements [c*N/n, (c+1)*N/n),
// collectives/slices.h), which puts every element of T in the same chunk
// whatever else was fused with it. Results are bitwise identical across
// runs and across ranks. The layout is virtual (collectives/parts.h): the
// ring sends from and reduces into the tensors themselves, with no copy
// into a fusion buffer and back.
//
// Process sets: a response of set S runs on this rank's subgroup mesh of
// S (flat ring; the hierarchical allreduce is for the global set), with
// ranks, roots and Average's divisor counted within S.
//
// Completion: every handle is completed before execute() returns.
#pragma once

#include <memory>
#include <vector>

#include "collectives/allreduce_choice.h"
#include "collectives/parts.h"
#include "engine/backend.h"
#include "engine/handle_table.h"
#include "engine/op_timeline.h"
#include "engine/process_sets.h"
#include "transport/mesh.h"

namespace ring {

class CpuRingBackend : public Backend {
 public:
  // `mesh` (every rank), `handles` and `sets` (null: only the global set)
  // must outlive the backend.
  CpuRingBackend(Mesh* mesh, HandleTable* handles, const ProcessSetTable* sets = nullptr)
      : world_(mesh), mesh_(mesh), handles_(handles), sets_(sets) {}

  // Allreduces run hierarchically over these two subgroups of the mesh
  // (collectives.h: hierarchical_allreduce); null: flat ring.
  void set_hierarchy(std::unique_ptr<Mesh> local, std::unique_ptr<Mesh> cross) {
    local_ = std::move(local);
    cross_ = std::move(cross);
  }
  // How allreduces choose their algorithm (collectives/allreduce_choice.h);
  // `one_host`: every rank of the job is on this host.
  void set_allreduce_choice(AllreduceMode mode, bool one_host) {
    mode_ = mode;
    one_host_ = one_host;
  }
  // Execution phases go to `timeline` (null: none).
  void set_timeline(Timeline* timeline) { timeline_.set_timeline(timeline); }

  const char* name() const override { return "cpu ring"; }
  bool serves(const Device& device) const override { return device.type == DeviceType::CPU; }
  bool enabled(const Response& r) const override { return serves(r.device); }
  void execute(const Response& r, std::vector<Entry>& entries) override;

  // execute() in two steps, for a backend that stages other memory through
  // this one (backends/gpu/host_staged.h). run(): the operation on host memory,
  // without completing a handle; results[i] is entries[i]'s (engine-owned
  // output, shape, splits). An entry's output may be its input (in place).
  // finish(): closes the entries in the timeline and completes their handles.
  std::vector<OpResult> run(const Response& r, std::vector<Entry>& entries);
  void finish(std::vector<Entry>& entries, std::vector<OpResult>& results);

  // The mesh of r's process set (this rank's subgroup for a set, the whole
  // mesh for the global one), for another backend that runs r over it.
  Mesh& mesh_for(const Response& r) {
    select_mesh(r);
    return *mesh_;
  }
  // True when r's allreduce runs hierarchically here (the global set, with
  // set_hierarchy() given): `local` and `cross` are then those subgroups.
  bool hierarchy_for(const Response& r, Mesh** local, Mesh** cross) {
    select_mesh(r);
    if (!hierarchical()) return false;
    *local = local_.get();
    *cross = cross_.get();
    return true;
  }
  // ProcessSet::serial of mesh_for()'s last response's set (0: global).
  uint64_t set_serial() const { return set_ ? set_->serial : 0; }
  // The index within the mesh of mesh_for()'s last response of a global rank.
  int index_in_mesh(int global_rank) const { return set_ ? set_->index_of(global_rank) : global_rank; }

 private:
  // Points mesh_ (and set_) at the mesh of r's process set.
  void select_mesh(const Response& r);
  bool hierarchical() const { return mesh_ == world_ && local_ && cross_; }
  // Entries' outputs are set; several entries are fused, without a
  // fusion buffer (collectives/parts.h) unless their memory overlaps.
  void allreduce(std::vector<Entry>& entries);
  // The entries' slices as the reduction's buffer, chunk-major, counted
  // into `chunks`: in_place() the tensors themselves (prescaled into the
  // outputs first), stage_in() a copy of the inputs in the fusion buffer
  // (prescaled there), whose results stage_out() copies to the outputs.
  Parts in_place(std::vector<Entry>& entries, int n, size_t esize, std::vector<size_t>& chunks);
  Parts stage_in(std::vector<Entry>& entries, int n, size_t esize, std::vector<size_t>& chunks);
  void stage_out(std::vector<Entry>& entries, int n, size_t esize);
  // op=Adasum: the entries' tensors, scaled, reduced together on the flat
  // mesh (collectives.h: adasum_allreduce).
  void adasum(std::vector<Entry>& entries);
  // The allreduce of `buf` (chunk layout `chunks` for the flat ring), flat
  // or hierarchical, inside its timeline phase.
  void reduce(const Request& q, const Parts& buf, const std::vector<size_t>& chunks, double post);
  std::vector<OpResult> run_allreduce(std::vector<Entry>& entries);
  // Runs a one-entry collective inside its timeline phase.
  template <class Run>
  std::vector<OpResult> collective(std::vector<Entry>& entries, Run run);
  OpResult allgather(Entry& e, const std::vector<int64_t>& first_dims);
  OpResult broadcast(Entry& e);
  OpResult alltoall(Entry& e, const std::vector<int64_t>& splits);
  OpResult reducescatter(Entry& e);
  // Output memory for `e`: the caller's, or a new engine-owned buffer.
  uint8_t* output_for(Entry& e, size_t bytes, OpResult& res);
  uint8_t* fusion(size_t bytes);
  // Zero input and output buffers for the stand-ins (handle 0) in entries.
  void fill_stand_ins(std::vector<Entry>& entries);

  Mesh* world_;
  Mesh* mesh_;  // of the response running now: world_ or its set's subgroup
  HandleTable* handles_;
  const ProcessSetTable* sets_;
  std::shared_ptr<const ProcessSet> set_;  // of the response running now (null: global)
  std::unique_ptr<Mesh> local_, cross_;  // hierarchical allreduce
  std::vector<uint8_t> fusion_;
  std::vector<std::vector<uint8_t>> stand_ins_;  // zero buffers of a joined rank
  OpTimeline timeline_;
  AllreduceMode mode_ = AllreduceMode::Auto;
  bool one_host_ = true;
};

}  // namespace ring
