#include "engine/backends/cpu_ring/cpu_ring.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "collectives/collectives.h"
#include "collectives/slices.h"
#include "common/error.h"
#include "reduce/reduce.h"

namespace ring {
namespace {

// Calls f(entry, c, at, len) for slice c of every entry, chunk by chunk
// (the chunk-major order); `at` and `len` are the slice's bytes.
template <class F>
void for_each_slice(std::vector<Entry>& entries, int n, size_t esize, F&& f) {
  for (int c = 0; c < n; ++c)
    for (auto& e : entries) {
      const size_t count = static_cast<size_t>(e.req.num_elements());
      f(e, c, slice_offset(count, n, c) * esize, slice_count(count, n, c) * esize);
    }
}

// True when some entry's output overlaps another entry's input or output,
// or its own input other than exactly (in place). Reducing straight in the
// tensors would then read partial results where inputs were expected (one
// array submitted twice in place, say). Overlapping inputs are fine.
bool memory_overlaps(const std::vector<Entry>& entries, size_t esize) {
  struct Range {
    uintptr_t begin, end;
    bool output;
  };
  std::vector<Range> ranges;
  for (const auto& e : entries) {
    const size_t bytes = static_cast<size_t>(e.req.num_elements()) * esize;
    if (bytes == 0) continue;
    const auto out = reinterpret_cast<uintptr_t>(e.output), in = reinterpret_cast<uintptr_t>(e.input);
    ranges.push_back({out, out + bytes, true});
    if (in != out) ranges.push_back({in, in + bytes, false});
  }
  if (ranges.size() < 2) return false;
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) { return a.begin < b.begin; });
  // Any overlapping pair overlaps the range reaching furthest so far, or
  // contains a pair that does (both hold the later one's start).
  Range reach = ranges[0];
  for (size_t i = 1; i < ranges.size(); ++i) {
    const Range& r = ranges[i];
    if (r.begin < reach.end && (r.output || reach.output)) return true;
    if (r.end > reach.end) reach = r;
  }
  return false;
}

}  // namespace

uint8_t* CpuRingBackend::fusion(size_t bytes) {
  if (fusion_.size() < bytes) fusion_.resize(bytes);
  return fusion_.data();
}

uint8_t* CpuRingBackend::output_for(Entry& e, size_t bytes, OpResult& res) {
  if (e.output) return static_cast<uint8_t*>(e.output);
  res.data = std::make_shared<std::vector<uint8_t>>(bytes);
  return res.data->data();
}

void CpuRingBackend::fill_stand_ins(std::vector<Entry>& entries) {
  stand_ins_.clear();
  for (auto& e : entries) {
    if (e.handle != 0) continue;
    const size_t bytes = static_cast<size_t>(e.req.num_elements()) * dtype_size(e.req.dtype);
    stand_ins_.emplace_back(bytes, 0);
    e.input = stand_ins_.back().data();
    stand_ins_.emplace_back(bytes, 0);
    e.output = stand_ins_.back().data();
  }
}

void CpuRingBackend::finish(std::vector<Entry>& entries, std::vector<OpResult>& results) {
  timeline_.close(entries);
  std::vector<int64_t> handles;
  handles.reserve(entries.size());
  for (const Entry& e : entries) handles.push_back(e.handle);  // a joined rank's stand-ins: 0, left alone
  handles_->complete_all(handles, results);  // frees the names
}

void CpuRingBackend::select_mesh(const Response& r) {
  mesh_ = world_;
  set_ = nullptr;
  if (r.process_set == 0) return;
  set_ = sets_ ? sets_->find(r.process_set) : nullptr;
  if (!set_ || !set_->mesh)
    throw_error(ErrorKind::Internal, "process set " + std::to_string(r.process_set) +
                                         " was removed on this rank while its operations were in flight");
  mesh_ = set_->mesh.get();
}

void CpuRingBackend::execute(const Response& r, std::vector<Entry>& entries) {
  std::vector<OpResult> results = run(r, entries);
  finish(entries, results);
}

std::vector<OpResult> CpuRingBackend::run(const Response& r, std::vector<Entry>& entries) {
  select_mesh(r);
  timeline_.open(entries, r);
  switch (r.op) {
    case OpType::Allreduce: return run_allreduce(entries);
    case OpType::Allgather: return collective(entries, [&] { return allgather(entries[0], r.sizes); });
    case OpType::Broadcast: return collective(entries, [&] { return broadcast(entries[0]); });
    case OpType::Alltoall: return collective(entries, [&] { return alltoall(entries[0], r.sizes); });
    case OpType::Reducescatter: return collective(entries, [&] { return reducescatter(entries[0]); });
    case OpType::Barrier:
      return collective(entries, [&] {
        barrier(*mesh_);
        return OpResult{};
      });
    case OpType::Join: {
      std::vector<OpResult> results(1);
      results[0].received_splits = {r.sizes.empty() ? -1 : r.sizes[0]};
      return results;
    }
  }
  throw_error(ErrorKind::Internal, "unknown operation in a response");
}

std::vector<OpResult> CpuRingBackend::run_allreduce(std::vector<Entry>& entries) {
  fill_stand_ins(entries);
  std::vector<OpResult> results(entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    Entry& e = entries[i];
    output_for(e, static_cast<size_t>(e.req.num_elements()) * dtype_size(e.req.dtype), results[i]);
    if (results[i].data) e.output = results[i].data->data();
    results[i].shape = e.req.shape;
  }
  allreduce(entries);
  return results;
}

template <class Run>
std::vector<OpResult> CpuRingBackend::collective(std::vector<Entry>& entries, Run run) {
  timeline_.phase_begin(collective_phase(entries[0].req.op));
  std::vector<OpResult> results(1);
  results[0] = run();
  timeline_.phase_end();
  return results;
}

void CpuRingBackend::reduce(const Request& q, const Parts& buf, const std::vector<size_t>& chunks, double post) {
  if (hierarchical()) {
    // The cross-host stage reduces this rank's chunk: every rank of a cross
    // mesh has the same one, so they all choose alike.
    const size_t chunk = chunks[local_->rank()] * dtype_size(q.dtype);
    const AllreduceAlgorithm a = choose_allreduce(mode_, cross_->size(), false, chunk);
    timeline_.phase_begin("HIERARCHICAL_ALLREDUCE");
    hierarchical_allreduce(*local_, *cross_, buf, chunks, q.dtype, q.reduce_op, post, a);
    timeline_.phase_end();
    return;
  }
  const AllreduceAlgorithm a = choose_allreduce(mode_, mesh_->size(), one_host_, buf.bytes());
  timeline_.phase_begin(allreduce_phase(a));
  allreduce_with(a, *mesh_, buf, chunks, q.dtype, q.reduce_op, post);
  timeline_.phase_end();
}

void CpuRingBackend::allreduce(std::vector<Entry>& entries) {
  const Request& q = entries[0].req;
  if (q.reduce_op == ReduceOp::Adasum) return adasum(entries);
  const size_t esize = dtype_size(q.dtype);
  // The chunk-major layout (see cpu_ring.h) with the chunks of the first
  // stage: the ranks of the ring, or of this host for the hierarchical
  // allreduce. Chunk c is slice c of every tensor, read from and written to
  // the tensors themselves; one tensor's slices make one contiguous part.
  const int n = hierarchical() ? local_->size() : mesh_->size();
  std::vector<size_t> chunks(n, 0);
  const bool staged = memory_overlaps(entries, esize);
  Parts buf = staged ? stage_in(entries, n, esize, chunks) : in_place(entries, n, esize, chunks);
  reduce(q, buf, chunks, q.post_factor(mesh_->size()));
  if (staged) stage_out(entries, n, esize);
}

Parts CpuRingBackend::in_place(std::vector<Entry>& entries, int n, size_t esize, std::vector<size_t>& chunks) {
  const Request& q = entries[0].req;
  if (q.prescale != 1.0) {
    // The inputs are read-only: each is scaled into its output, which
    // the reduction then reads and writes in place.
    timeline_.phase_begin("PRESCALE");
    for (auto& e : entries) {
      const size_t count = static_cast<size_t>(e.req.num_elements());
      if (count && e.output != e.input) std::memcpy(e.output, e.input, count * esize);
      scale_buffer(e.output, count, q.dtype, q.prescale);
      e.input = e.output;
    }
    timeline_.phase_end();
  }
  Parts buf;
  for_each_slice(entries, n, esize, [&](Entry& e, int c, size_t at, size_t len) {
    buf.add(static_cast<const uint8_t*>(e.input) + at, static_cast<uint8_t*>(e.output) + at, len);
    chunks[c] += len / esize;
  });
  return buf;
}

Parts CpuRingBackend::stage_in(std::vector<Entry>& entries, int n, size_t esize, std::vector<size_t>& chunks) {
  const Request& q = entries[0].req;
  timeline_.phase_begin("MEMCPY_IN_FUSION_BUFFER");
  size_t total = 0;
  for (auto& e : entries) total += static_cast<size_t>(e.req.num_elements()) * esize;
  uint8_t* work = fusion(total);
  size_t pos = 0;
  for_each_slice(entries, n, esize, [&](Entry& e, int c, size_t at, size_t len) {
    std::memcpy(work + pos, static_cast<const uint8_t*>(e.input) + at, len);
    pos += len;
    chunks[c] += len / esize;
  });
  if (q.prescale != 1.0) scale_buffer(work, total / esize, q.dtype, q.prescale);
  timeline_.phase_end();
  return Parts(work, work, total);
}

void CpuRingBackend::stage_out(std::vector<Entry>& entries, int n, size_t esize) {
  timeline_.phase_begin("MEMCPY_OUT_FUSION_BUFFER");
  const uint8_t* work = fusion_.data();
  size_t pos = 0;
  for_each_slice(entries, n, esize, [&](Entry& e, int, size_t at, size_t len) {
    std::memcpy(static_cast<uint8_t*>(e.output) + at, work + pos, len);
    pos += len;
  });
  timeline_.phase_end();
}

void CpuRingBackend::adasum(std::vector<Entry>& entries) {
  const Request& q = entries[0].req;
  std::vector<void*> tensors;
  std::vector<size_t> counts;
  for (auto& e : entries) {
    const size_t count = static_cast<size_t>(e.req.num_elements());
    if (count && e.output != e.input) std::memcpy(e.output, e.input, count * dtype_size(q.dtype));
    if (q.prescale != 1.0) scale_buffer(e.output, count, q.dtype, q.prescale);
    tensors.push_back(e.output);
    counts.push_back(count);
  }
  timeline_.phase_begin("ADASUM_ALLREDUCE");
  adasum_allreduce(*mesh_, tensors, counts, q.dtype);
  timeline_.phase_end();
  if (q.postscale != 1.0)
    for (size_t i = 0; i < tensors.size(); ++i) scale_buffer(tensors[i], counts[i], q.dtype, q.postscale);
}

OpResult CpuRingBackend::allgather(Entry& e, const std::vector<int64_t>& first_dims) {
  const Request& q = e.req;
  const int n = mesh_->size();
  const size_t row_bytes = static_cast<size_t>(q.row_elements()) * dtype_size(q.dtype);
  std::vector<size_t> blocks(n);
  size_t total = 0, offset = 0;
  for (int r = 0; r < n; ++r) {
    blocks[r] = static_cast<size_t>(first_dims[r]) * row_bytes;
    if (r < mesh_->rank()) offset += blocks[r];
    total += blocks[r];
  }
  OpResult res;
  e.output = nullptr;
  uint8_t* out = output_for(e, total, res);
  if (blocks[mesh_->rank()]) std::memcpy(out + offset, e.input, blocks[mesh_->rank()]);
  ring_allgather(*mesh_, out, blocks);
  int64_t rows = 0;
  for (int64_t d : first_dims) rows += d;
  res.shape = q.shape.empty() ? std::vector<int64_t>{rows} : q.shape;
  res.shape[0] = rows;
  return res;
}

OpResult CpuRingBackend::broadcast(Entry& e) {
  const Request& q = e.req;
  size_t bytes = static_cast<size_t>(q.num_elements()) * dtype_size(q.dtype);
  OpResult res;
  uint8_t* out = output_for(e, bytes, res);
  const int root = set_ ? set_->index_of(q.root) : q.root;  // q.root is a global rank
  if (mesh_->rank() == root && out != e.input && bytes) std::memcpy(out, e.input, bytes);
  ring::broadcast(*mesh_, out, bytes, root);
  res.shape = q.shape;
  return res;
}

OpResult CpuRingBackend::alltoall(Entry& e, const std::vector<int64_t>& splits) {
  const Request& q = e.req;
  const int n = mesh_->size(), me = mesh_->rank();
  const size_t row_bytes = static_cast<size_t>(q.row_elements()) * dtype_size(q.dtype);
  std::vector<size_t> send(n), recv(n);
  size_t total = 0;
  int64_t rows = 0;
  for (int r = 0; r < n; ++r) {
    send[r] = static_cast<size_t>(splits[me * n + r]) * row_bytes;
    recv[r] = static_cast<size_t>(splits[r * n + me]) * row_bytes;
    total += recv[r];
    rows += splits[r * n + me];
  }
  OpResult res;
  e.output = nullptr;
  uint8_t* out = output_for(e, total, res);
  ring::alltoall(*mesh_, e.input, send, out, recv);
  for (int r = 0; r < n; ++r) res.received_splits.push_back(splits[r * n + me]);
  res.shape = q.shape;
  res.shape[0] = rows;
  return res;
}

OpResult CpuRingBackend::reducescatter(Entry& e) {
  const Request& q = e.req;
  const int n = mesh_->size(), me = mesh_->rank();
  const size_t esize = dtype_size(q.dtype);
  const size_t row = static_cast<size_t>(q.row_elements());
  const size_t rows = static_cast<size_t>(q.shape[0]);
  std::vector<size_t> chunks = slice_counts(rows, n);
  for (auto& c : chunks) c *= row;
  size_t total = rows * row;
  uint8_t* work = fusion(total * esize);
  const void* src = e.input;
  if (q.prescale != 1.0 && total) {
    std::memcpy(work, e.input, total * esize);
    scale_buffer(work, total, q.dtype, q.prescale);
    src = work;
  }
  ring_reducescatter(*mesh_, src, work, chunks, q.dtype, q.reduce_op, q.post_factor(n));
  uint8_t* mine = work + slice_offset(rows, n, me) * row * esize;
  OpResult res;
  uint8_t* out = output_for(e, chunks[me] * esize, res);
  if (chunks[me]) std::memcpy(out, mine, chunks[me] * esize);
  res.shape = q.shape;
  res.shape[0] = static_cast<int64_t>(slice_count(rows, n, me));
  return res;
}

}  // namespace ring
