#include "engine/backends/gpu/nccl_backend.h"

#include <algorithm>

#include "collectives/slices.h"
#include "common/types.h"
#include "engine/backends/gpu/nccl_call.h"
#include "gpu/batched_copy.h"
#include "gpu/device_pool.h"
#include "gpu/device_streams.h"

namespace ring::gpu {
namespace {

CUdeviceptr ptr(const void* p) { return reinterpret_cast<CUdeviceptr>(p); }
void* at(CUdeviceptr base, size_t offset) { return reinterpret_cast<void*>(base + offset); }
size_t bytes_of(const Request& q) { return static_cast<size_t>(q.num_elements()) * dtype_size(q.dtype); }

// The timeline phase of `op` run on NCCL.
const char* nccl_phase(OpType op, bool hierarchical) {
  switch (op) {
    case OpType::Allreduce: return hierarchical ? "NCCL_HIERARCHICAL_ALLREDUCE" : "NCCL_ALLREDUCE";
    case OpType::Allgather: return "NCCL_ALLGATHER";
    case OpType::Broadcast: return "NCCL_BROADCAST";
    case OpType::Alltoall: return "NCCL_ALLTOALL";
    case OpType::Reducescatter: return "NCCL_REDUCESCATTER";
    case OpType::Barrier:
    case OpType::Join: break;
  }
  return "NCCL";
}

}  // namespace

NcclBackend::Lane& NcclBackend::lane(int device, int index) {
  auto& slot = lanes_[{device, index}];
  if (!slot) {
    slot = std::make_unique<Lane>(device, create_engine_stream());
  }
  return *slot;
}

CUdeviceptr NcclBackend::output_for(const Call& c, Entry& e, size_t bytes, OpResult& res) {
  if (e.output) return ptr(e.output);
  res.device_data = pool_take(c.device, bytes, c.lane->stream, e.stream);
  res.device_bytes = bytes;
  res.device = Device{DeviceType::CUDA, c.device};
  return ptr(res.device_data.get());
}

void NcclBackend::check() {
  comms_.destroy_retired([this](ncclComm_t comm) { return !finalizer_.uses(comm); });
  GpuFailure failure;
  if (finalizer_.failure(&failure)) throw_error(failure.kind, failure.reason);
}

void NcclBackend::execute(const Response& r, std::vector<Entry>& entries) {
  const Request& q = entries[0].req;
  Mesh& mesh = cpu_->mesh_for(r);
  const uint64_t set = cpu_->set_serial();
  if (!runs_on_nccl(r, q, mesh.size()) || !comms_.usable(static_cast<int64_t>(set), mesh))
    return host_->execute(r, entries);
  Call c;
  c.device = home_device(local_rank_);  // a rank that never sent a GPU tensor: its local rank's
  c.n = mesh.size();
  c.me = mesh.rank();
  ScopedDevice current(c.device);
  int& next = next_lane_[set];
  const int index = next;
  next = (next + 1) % streams_;
  c.lane = &lane(c.device, index);
  choose_comm(r, mesh, static_cast<int64_t>(set), index, c);
  GpuWork work;
  c.keep = &work.keep;
  work.device = c.device;
  work.stream = c.lane->stream;
  work.comm = c.comm;
  for (const Entry& e : entries) {
    if (e.ready)
      cuda_check(cuda_driver().cuStreamWaitEvent(c.lane->stream, static_cast<CUevent>(e.ready.get()), 0),
                 "cuStreamWaitEvent (an input's producer)");
    work.handles.push_back(e.handle);
  }
  work.results.resize(entries.size());
  timeline_.open(entries, r);
  work.timeline = timeline_.defer(entries, nccl_phase(r.op, c.stage.has_value()));
  run(c, r, entries, work.results);
  work.done = record_event(c.device, reinterpret_cast<uint64_t>(c.lane->stream));
  complete_now(entries, work);
  finalizer_.add(std::move(work));
}

void NcclBackend::complete_now(const std::vector<Entry>& entries, GpuWork& w) {
  const CudaDriver& cu = cuda_driver();
  auto now = [&](size_t i) { return w.handles[i] != 0 && (async_completion_ || entries[i].complete_at_enqueue); };
  for (size_t i = 0; i < entries.size(); ++i) {
    if (!now(i)) continue;
    cuda_check(cu.cuStreamWaitEvent(reinterpret_cast<CUstream>(entries[i].stream), static_cast<CUevent>(w.done.get()), 0),
               "cuStreamWaitEvent (the caller's stream waits for the result)");
  }
  for (size_t i = 0; i < entries.size(); ++i) {
    if (!now(i)) continue;
    if (w.results[i].device_data) w.results[i].device_ready = w.done;  // a DLPack consumer's stream waits for it
    handles_->complete(w.handles[i], std::move(w.results[i]));
    w.handles[i] = 0;
  }
}

void NcclBackend::choose_comm(const Response& r, Mesh& mesh, int64_t group, int lane_index, Call& c) {
  Mesh* local = nullptr;
  Mesh* cross = nullptr;
  if (!hierarchical_ || r.op != OpType::Allreduce || !cpu_->hierarchy_for(r, &local, &cross)) {
    c.comm = comms_.get(group, mesh, c.device, lane_index);
    return;
  }
  c.comm = comms_.get(kHostGroup, *local, c.device, lane_index);
  HostStage h;
  h.device = c.device;
  h.stream = c.lane->stream;
  h.comm = c.comm;
  h.size = local->size();
  h.rank = local->rank();
  h.cross = cross;
  h.staging = &c.lane->staging;
  h.timeout_seconds = timeout_seconds_;
  c.stage = h;
}

void NcclBackend::run(const Call& c, const Response& r, std::vector<Entry>& entries, std::vector<OpResult>& results) {
  switch (r.op) {
    case OpType::Allreduce: return allreduce(c, entries, results);
    case OpType::Allgather: return allgather(c, entries[0], r.sizes, results[0]);
    case OpType::Broadcast: return broadcast(c, entries[0], results[0]);
    case OpType::Alltoall: return alltoall(c, entries[0], r.sizes, results[0]);
    case OpType::Reducescatter: return reducescatter(c, entries[0], results[0]);
    case OpType::Barrier:
    case OpType::Join: break;
  }
  throw_error(ErrorKind::Internal, std::string("the NCCL backend got ") + op_type_name(r.op));
}

void NcclBackend::allreduce(const Call& c, std::vector<Entry>& entries, std::vector<OpResult>& results) {
  const CudaDriver& cu = cuda_driver();
  const Request& q = entries[0].req;
  const ncclDataType_t dt = *nccl_type(q.dtype);
  const size_t esize = dtype_size(q.dtype);
  CUstream s = c.lane->stream;
  std::vector<CUdeviceptr> outs(entries.size());
  size_t total = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    Entry& e = entries[i];
    results[i].shape = e.req.shape;
    if (e.handle != 0) outs[i] = output_for(c, e, bytes_of(e.req), results[i]);
    total += bytes_of(e.req);
  }
  if (total == 0) return;
  const NcclLibrary& nccl = nccl_library();
  if (!c.stage && entries.size() == 1 && entries[0].handle != 0) {  // straight from the input to the output
    Reduction red(q, c.n, c.comm);
    nccl_check(nccl.ncclAllReduce(entries[0].input, at(outs[0], 0), total / esize, dt, red.op(), c.comm, s),
               "ncclAllReduce", c.comm);
    return;
  }
  // Fused: every entry at a 16-byte boundary (fusion_padded); the padding
  // is reduced along (every rank pads alike) and never copied out.
  size_t fused_bytes = 0;
  for (const Entry& e : entries) fused_bytes += fusion_padded(bytes_of(e.req));
  const size_t count = fused_bytes / esize;  // 16 is a multiple of every element size
  const size_t room = c.stage ? hierarchical_elements(count, c.stage->size) * esize : fused_bytes;
  const CUdeviceptr fused = c.lane->fusion.at(room, c.keep);
  std::vector<CopyJob> in, out;
  size_t offset = 0;
  for (size_t i = 0; i < entries.size(); ++i) {  // a joined rank's stand-ins (handle 0) contribute zeros
    const Entry& e = entries[i];
    const size_t n = bytes_of(e.req);
    if (n && e.handle != 0) {
      in.push_back({fused + offset, ptr(e.input), n});
      out.push_back({outs[i], fused + offset, n});
    }
    if (n && e.handle == 0) cuda_check(cu.cuMemsetD8Async(fused + offset, 0, n, s), "zeros of a joined rank");
    offset += fusion_padded(n);
  }
  batched_copy(c.device, in, s);
  if (c.stage) {
    hierarchical_allreduce(*c.stage, fused, count, q.dtype, hierarchical_reduction(*nccl_reduction(q, c.n), c.n));
  } else {
    Reduction red(q, c.n, c.comm);
    nccl_check(nccl.ncclAllReduce(at(fused, 0), at(fused, 0), count, dt, red.op(), c.comm, s), "ncclAllReduce", c.comm);
  }
  batched_copy(c.device, out, s);
}

void NcclBackend::allgather(const Call& c, Entry& e, const std::vector<int64_t>& first_dims, OpResult& res) {
  const Request& q = e.req;
  const size_t row_bytes = static_cast<size_t>(q.row_elements()) * dtype_size(q.dtype);
  std::vector<size_t> offsets(c.n + 1, 0);
  for (int r = 0; r < c.n; ++r) offsets[r + 1] = offsets[r] + static_cast<size_t>(first_dims[r]) * row_bytes;
  e.output = nullptr;
  const CUdeviceptr out = output_for(c, e, offsets[c.n], res);
  int64_t rows = 0;
  for (int64_t d : first_dims) rows += d;
  res.shape = q.shape.empty() ? std::vector<int64_t>{rows} : q.shape;
  res.shape[0] = rows;
  const NcclLibrary& nccl = nccl_library();
  if (std::all_of(first_dims.begin(), first_dims.end(), [&](int64_t d) { return d == first_dims[0]; })) {
    if (offsets[1])  // every rank sends as many rows: NCCL's own allgather
      nccl_check(nccl.ncclAllGather(e.input, at(out, 0), offsets[1], ncclUint8, c.comm, c.lane->stream),
                 "ncclAllGather", c.comm);
    return;
  }
  Group group(c.comm);  // first dimensions differ: one broadcast per rank
  for (int r = 0; r < c.n; ++r) {
    const size_t n = offsets[r + 1] - offsets[r];
    const void* send = r == c.me ? e.input : at(out, offsets[r]);
    if (n) nccl_check(nccl.ncclBroadcast(send, at(out, offsets[r]), n, ncclUint8, r, c.comm, c.lane->stream),
                      "ncclBroadcast (allgather)", c.comm);
  }
  group.end();
}

void NcclBackend::broadcast(const Call& c, Entry& e, OpResult& res) {
  const size_t n = bytes_of(e.req);
  const CUdeviceptr out = output_for(c, e, n, res);
  res.shape = e.req.shape;
  if (!n) return;
  const int root = cpu_->index_in_mesh(e.req.root);
  nccl_check(nccl_library().ncclBroadcast(e.input, at(out, 0), n, ncclUint8, root, c.comm, c.lane->stream),
             "ncclBroadcast", c.comm);
}

void NcclBackend::alltoall(const Call& c, Entry& e, const std::vector<int64_t>& splits, OpResult& res) {
  const Request& q = e.req;
  const size_t row_bytes = static_cast<size_t>(q.row_elements()) * dtype_size(q.dtype);
  std::vector<size_t> send(c.n), recv(c.n);
  size_t total = 0;
  int64_t rows = 0;
  for (int r = 0; r < c.n; ++r) {
    send[r] = static_cast<size_t>(splits[c.me * c.n + r]) * row_bytes;
    recv[r] = static_cast<size_t>(splits[r * c.n + c.me]) * row_bytes;
    total += recv[r];
    rows += splits[r * c.n + c.me];
    res.received_splits.push_back(splits[r * c.n + c.me]);
  }
  e.output = nullptr;
  const CUdeviceptr out = output_for(c, e, total, res);
  res.shape = q.shape;
  res.shape[0] = rows;
  const NcclLibrary& nccl = nccl_library();
  Group group(c.comm);
  size_t soff = 0, roff = 0;
  for (int r = 0; r < c.n; ++r) {
    if (send[r])
      nccl_check(nccl.ncclSend(static_cast<const uint8_t*>(e.input) + soff, send[r], ncclUint8, r, c.comm,
                               c.lane->stream), "ncclSend (alltoall)", c.comm);
    if (recv[r]) nccl_check(nccl.ncclRecv(at(out, roff), recv[r], ncclUint8, r, c.comm, c.lane->stream), "ncclRecv (alltoall)", c.comm);
    soff += send[r];
    roff += recv[r];
  }
  group.end();
}

void NcclBackend::reducescatter(const Call& c, Entry& e, OpResult& res) {
  const Request& q = e.req;
  const size_t esize = dtype_size(q.dtype), row = static_cast<size_t>(q.row_elements());
  const size_t rows = static_cast<size_t>(q.shape[0]);
  std::vector<size_t> counts = slice_counts(rows, c.n);
  for (auto& n : counts) n *= row;
  const CUdeviceptr out = output_for(c, e, counts[c.me] * esize, res);
  res.shape = q.shape;
  res.shape[0] = static_cast<int64_t>(slice_count(rows, c.n, c.me));
  if (rows * row == 0) return;
  const ncclDataType_t dt = *nccl_type(q.dtype);
  Reduction red(q, c.n, c.comm);
  const NcclLibrary& nccl = nccl_library();
  if (rows % static_cast<size_t>(c.n) == 0) {
    nccl_check(nccl.ncclReduceScatter(e.input, at(out, 0), counts[0], dt, red.op(), c.comm, c.lane->stream),
               "ncclReduceScatter", c.comm);
    return;
  }
  Group group(c.comm);  // uneven rows: one reduce per rank, rooted at the rank that keeps the rows
  size_t offset = 0;
  for (int r = 0; r < c.n; ++r) {
    if (counts[r])
      nccl_check(nccl.ncclReduce(static_cast<const uint8_t*>(e.input) + offset * esize, at(out, 0), counts[r], dt,
                                 red.op(), r, c.comm, c.lane->stream), "ncclReduce (reducescatter)", c.comm);
    offset += counts[r];
  }
  group.end();
}

}  // namespace ring::gpu
