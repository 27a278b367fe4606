#include "engine/runtime.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "collectives/allreduce_choice.h"
#include "collectives/slices.h"
#include "common/cache_tuning.h"
#include "common/error.h"
#include "engine/backends/registry.h"
#include "engine/mesh_names.h"
#include "engine/published.h"
#include "gpu/cuda_driver.h"

namespace ring {
namespace {

// The job's stop reason, as an operation that never started gets it.
std::string not_started(const std::string& reason, const Request& req) {
  return reason + " (" + op_type_name(req.op) + " of tensor '" + req.name + "' not started)";
}

constexpr char kEndpointSeparator = '\n';

MeshOptions mesh_options(const RuntimeOptions& o, const Config& c, MeshRole role, size_t ring_bytes) {
  MeshOptions m;
  m.rank = o.rank;
  m.size = o.size;
  m.secret = o.secret;
  m.job_id = mesh_job_id(o.job_id, role);
  m.host_id = o.host_id;
  m.bind_host = o.bind_host;
  m.advertise_host = o.advertise_host;
  m.force_tcp = c.force_tcp;
  m.encrypt = c.encrypt;
  m.shm_ring_bytes = ring_bytes;
  m.connect_timeout_s = std::max(60.0, c.timeout_seconds);
  return m;
}

}  // namespace

Runtime::Runtime(RuntimeOptions opts)
    : opts_(std::move(opts)),
      config_(Config::from_env()),
      cache_(config_.cache_capacity, opts_.size),
      sets_(std::max(opts_.size, 1)) {
  if (opts_.size < 1 || opts_.rank < 0 || opts_.rank >= opts_.size)
    throw_error(ErrorKind::BadArgument, "rank " + std::to_string(opts_.rank) + " is outside a world of size " +
                                            std::to_string(opts_.size));
  set_log_config(config_.log_level, opts_.rank);
  // The sizes of the large-message paths, from this machine's caches (set
  // before the data mesh, whose shared-memory rings take one of them).
  const CacheSizes caches = read_cache_sizes();
  const CacheTuning tuning = choose_cache_tuning(caches, config_.cache_overrides);
  set_cache_tuning(tuning);
  if (log_enabled(LogLevel::Debug)) log_line(LogLevel::Debug, describe_cache_tuning(caches, tuning));
  data_builder_ = std::make_unique<MeshBuilder>(mesh_options(opts_, config_, MeshRole::Data, tuning.shm_ring_bytes));
  control_builder_ = std::make_unique<MeshBuilder>(mesh_options(opts_, config_, MeshRole::Control, 1u << 20));
}

Runtime::~Runtime() {
  withdraw_runtime(this);
  try {
    shutdown();
  } catch (...) {
  }
  executor_.reset();  // GPU work still finishing records in timeline_, destroyed before executor_ otherwise
}

std::string Runtime::local_endpoint() {
  const char sep = kEndpointSeparator;
  return data_builder_->local_endpoint() + sep + control_builder_->local_endpoint() + sep + affinity_mask() + sep +
         opts_.host_id;
}

void Runtime::connect(const std::vector<std::string>& endpoints) {
  if (static_cast<int>(endpoints.size()) != opts_.size)
    throw_error(ErrorKind::BadArgument, "expected " + std::to_string(opts_.size) + " endpoints, got " +
                                            std::to_string(endpoints.size()));
  std::vector<std::string> data, control, local_masks, hosts;
  std::string mine;
  for (int r = 0; r < opts_.size; ++r) {
    const std::string& e = endpoints[r];
    // data, control, affinity mask, host (the rest: a host name may hold anything)
    size_t c1 = e.find(kEndpointSeparator);
    size_t c2 = c1 == std::string::npos ? c1 : e.find(kEndpointSeparator, c1 + 1);
    size_t c3 = c2 == std::string::npos ? c2 : e.find(kEndpointSeparator, c2 + 1);
    if (c3 == std::string::npos) throw_error(ErrorKind::BadArgument, "malformed endpoint from the rendezvous");
    data.push_back(e.substr(0, c1));
    control.push_back(e.substr(c1 + 1, c2 - c1 - 1));
    hosts.push_back(e.substr(c3 + 1));
    if (hosts.back() != opts_.host_id) continue;
    local_masks.push_back(e.substr(c2 + 1, c3 - c2 - 1));
    if (r == opts_.rank) mine = local_masks.back();
  }
  data_builder_->connect(data);
  control_builder_->connect(control);
  cpus_per_rank_ = cpus_of_rank(mine, local_masks);
  even_hosts_ = hosts_laid_out_evenly(hosts);
}

void Runtime::start() {
  std::lock_guard<std::mutex> lock(state_mu_);
  if (state_ != State::Created) throw_error(ErrorKind::BadArgument, "Runtime::start called twice");
  data_builder_->finalize();
  control_builder_->finalize();
  data_ = data_builder_->build();
  control_ = control_builder_->build();
  data_builder_.reset();
  control_builder_.reset();
  data_->set_timeout(config_.timeout_seconds);
  control_->set_timeout(config_.timeout_seconds);
  loop_.heartbeats =
      std::make_unique<Heartbeats>(control_.get(), Heartbeats::watched_peers(*control_), config_.timeout_seconds);
  constexpr double kTickSeconds = 0.25;  // long transfers still send heartbeats on time
  data_->set_tick([this] { loop_.heartbeats->send_due(); }, kTickSeconds);
  // Waits spin only when this rank has a CPU of its own (cpus_per_rank_,
  // from its host's affinities: mpirun binds each rank to one core, which
  // the host's CPUs over its ranks would count as 0.5). Oversubscribed, a spinning
  // waiter takes the core from the peer it waits for (measured on 2 cores:
  // np=4 small allreduces 119-125 us without the spin, 200-340 us with it;
  // at np=2 the spin still helps many small tensors at once).
  constexpr double kSpinCpusPerRank = 1.0;
  Backoff::set_spin(cpus_per_rank_ >= kSpinCpusPerRank);
  queue_.set_doorbell(control_->doorbell());
  executor_ = std::make_unique<Executor>(&handles_);
  const BackendLayout layout{opts_.rank,       opts_.size,       opts_.local_rank, opts_.local_size,
                             opts_.cross_rank, opts_.cross_size, even_hosts_};
  FastPathOptions fast;
  fast.enabled = config_.fast_path;
  // Alike on every rank: hierarchy_used reads the job's hosts (registry.h).
  fast.ring_order = ring_order(config_.allreduce_mode, opts_.size, opts_.local_size == opts_.size) &&
                    !hierarchy_used(config_.hierarchical_allreduce, layout);
  fast.answer_timeout_s = config_.stall_shutdown_seconds > 0
                             ? std::min(config_.timeout_seconds, config_.stall_shutdown_seconds)
                             : config_.timeout_seconds;
  fast.warn_after_s = config_.stall_check_seconds;
  fast_ = std::make_unique<FastPath>(control_.get(), &cache_, &handles_, &pending_, fast);
  if (opts_.rank == 0 && !config_.timeline_path.empty())
    timeline_.start(config_.timeline_path, config_.timeline_mark_cycles);
  add_backends(*executor_, {data_.get(), &handles_, &sets_, &config_, opts_.rank == 0 ? &timeline_ : nullptr, layout});
  state_ = State::Running;
  thread_ = std::thread([this] { loop(); });
  if (log_enabled(LogLevel::Info))
    log_line(LogLevel::Info, "started: rank " + std::to_string(opts_.rank) + " of " + std::to_string(opts_.size) +
                                 ", local rank " + std::to_string(opts_.local_rank) + " of " +
                                 std::to_string(opts_.local_size) + ", transport " +
                                 (config_.force_tcp ? "tcp" : "shm within a host, tcp across hosts") +
                                 ", fusion threshold " + std::to_string(config_.fusion_threshold_bytes) +
                                 " bytes, cycle time " + std::to_string(config_.cycle_time_ms) + " ms");
}

bool Runtime::running() const {
  std::lock_guard<std::mutex> lock(state_mu_);
  return state_ == State::Running;
}

void Runtime::add_process_set(int32_t id, const std::vector<int>& ranks) {
  std::vector<int> members = sets_.checked_ranks(ranks);
  std::unique_ptr<Mesh> mesh;
  {
    std::lock_guard<std::mutex> lock(state_mu_);
    if (state_ != State::Running) throw_error(ErrorKind::Shutdown, "ring is not running: process sets need init()");
    if (std::binary_search(members.begin(), members.end(), opts_.rank)) mesh = data_->subgroup(members);
  }
  sets_.add(id, std::move(members), std::move(mesh));
}

bool Runtime::remove_process_set(int32_t id) {
  if (id != 0 && handles_.has_name_prefix(qualified_name("", id)))
    throw_error(ErrorKind::BadArgument, "process set " + std::to_string(id) +
                                            " has operations in flight on rank " + std::to_string(opts_.rank) +
                                            ": synchronize them before removing it");
  const auto set = sets_.find(id);
  if (!sets_.remove(id)) return false;
  if (set) executor_->forget_set(set->serial);
  return true;
}

std::shared_ptr<const ProcessSet> Runtime::process_set_of(const Request& q) const {
  auto set = sets_.find(q.process_set);
  auto what = [&] { return std::string(op_type_name(q.op)) + " of tensor '" + q.name + "': "; };  // errors only
  if (!set)
    throw_error(ErrorKind::BadArgument, what() + "process set " + std::to_string(q.process_set) +
                                            " does not exist (never added, or removed)");
  if (!set->contains(opts_.rank))
    throw_error(ErrorKind::BadArgument, what() + "rank " + std::to_string(opts_.rank) +
                                            " is not a member of process set " + std::to_string(q.process_set));
  return set;
}

void Runtime::validate(const Request& q, const ProcessSet& set) const {
  auto bad = [&](const std::string& what) {
    throw_error(ErrorKind::BadArgument, std::string(op_type_name(q.op)) + " of tensor '" + q.name + "': " + what);
  };
  if (q.name.empty()) bad("the name must not be empty");
  for (int64_t d : q.shape)
    if (d < 0) bad("negative dimension in the shape");
  if (q.dtype == DataType::Bool &&
      (q.reduce_op == ReduceOp::Average || q.prescale != 1.0 || q.postscale != 1.0) &&
      (q.op == OpType::Allreduce || q.op == OpType::Reducescatter))
    bad("bool tensors support Sum, Min, Max and Product without scale factors");
  if (q.reduce_op == ReduceOp::Adasum) validate_adasum(q, set);
  if (q.op == OpType::Join && set.id != 0) bad("join runs on the global process set only");
  switch (q.op) {
    case OpType::Broadcast:
      if (q.root < 0 || q.root >= opts_.size)
        bad("root_rank " + std::to_string(q.root) + " is outside [0, " + std::to_string(opts_.size) + ")");
      if (!set.contains(q.root))
        bad("root_rank " + std::to_string(q.root) + " is not a member of process set " + std::to_string(set.id));
      break;
    case OpType::Alltoall: {
      if (q.shape.empty()) bad("needs at least one dimension");
      if (static_cast<int>(q.splits.size()) != set.size())
        bad("splits must have one entry per rank of the process set (" + std::to_string(set.size()) + "), got " +
            std::to_string(q.splits.size()));
      int64_t sum = 0;
      for (int64_t s : q.splits) {
        if (s < 0) bad("splits must not be negative");
        sum += s;
      }
      if (sum != q.shape[0])
        bad("splits sum to " + std::to_string(sum) + " but the first dimension is " + std::to_string(q.shape[0]));
      break;
    }
    case OpType::Reducescatter:
    case OpType::Allgather:
      if (q.shape.empty()) bad("needs at least one dimension");
      break;
    default:
      break;
  }
}

void Runtime::validate_adasum(const Request& q, const ProcessSet& set) const {
  const std::string what = std::string(op_type_name(q.op)) + " of tensor '" + q.name + "': op=Adasum ";
  if (q.op != OpType::Allreduce) throw_error(ErrorKind::BadArgument, what + "is supported by allreduce only");
  if (!is_floating(q.dtype))
    throw_error(ErrorKind::BadArgument, what + "needs a floating-point tensor (float16, bfloat16, float32, "
                                               "float64), got " + dtype_name(q.dtype));
  const int n = set.size();
  if (n & (n - 1))
    throw_error(ErrorKind::BadArgument, what + "supports a power-of-two number of ranks (1, 2, 4, 8, ...); " +
                                            (set.id == 0 ? "this job has " : "this process set has ") +
                                            std::to_string(n));
}

void Runtime::validate_output(const EnqueueArgs& args, const ProcessSet& set) const {
  const Request& q = args.req;
  size_t elements = static_cast<size_t>(q.num_elements());
  switch (q.op) {
    case OpType::Allreduce:
    case OpType::Broadcast:
      break;
    case OpType::Reducescatter:
      elements = slice_count(static_cast<size_t>(q.shape[0]), set.size(), set.index_of(opts_.rank)) *
                 static_cast<size_t>(q.row_elements());
      break;
    default:
      return;  // the engine allocates these outputs
  }
  size_t expected = elements * dtype_size(q.dtype);
  if (args.output && args.output_bytes != expected)
    throw_error(ErrorKind::BadArgument, std::string(op_type_name(q.op)) + " of tensor '" + q.name + "': output has " +
                                            std::to_string(args.output_bytes) + " bytes, the result needs " +
                                            std::to_string(expected));
}

Entry Runtime::checked_entry(EnqueueArgs args) const {
  auto set = process_set_of(args.req);
  validate(args.req, *set);
  validate_output(args, *set);
  if (args.req.process_set != 0) args.req.name = qualified_name(args.req.name, args.req.process_set);
  Entry e;
  e.req = std::move(args.req);
  e.input = args.input;
  e.output = e.req.op == OpType::Allgather || e.req.op == OpType::Alltoall ? nullptr : args.output;
  e.stream = args.stream;
  e.complete_at_enqueue = args.complete_at_enqueue;
  return e;
}

void Runtime::prepare_locked(Entry& e) {
  if (executor_->prepare(e, e.stream)) return;
  const Device& d = e.req.device;
  const std::string why = d.type == DeviceType::CUDA ? gpu::cuda_refusal(d.index) : "";
  throw_error(ErrorKind::BadArgument, std::string(op_type_name(e.req.op)) + " of tensor '" + e.req.name +
                                          "': no backend for device " + device_name(d) +
                                          (why.empty() ? "" : ": " + why));
}

std::vector<int64_t> Runtime::enqueue_group(std::vector<EnqueueArgs> group) {
  std::vector<Entry> entries;
  std::vector<std::string> names;
  entries.reserve(group.size());
  names.reserve(group.size());
  bool wake = false;
  for (EnqueueArgs& args : group) {
    wake = wake || args.wake;
    entries.push_back(checked_entry(std::move(args)));
    names.push_back(entries.back().req.name);
  }
  if (entries.empty()) return {};
  std::lock_guard<std::mutex> lock(state_mu_);
  if (state_ == State::Created) throw_error(ErrorKind::Shutdown, "ring is not initialized: call init() first");
  if (state_ == State::Stopped) throw RingError(stop_kind_, not_started(stop_reason_, entries.front().req));
  for (Entry& e : entries) prepare_locked(e);
  std::vector<int64_t> handles = handles_.create_all(names);
  for (size_t i = 0; i < entries.size(); ++i) entries[i].handle = handles[i];
  if (!wake) claim_drive();
  try {
    queue_.push(std::move(entries), wake);
  } catch (...) {
    for (int64_t h : handles) handles_.discard(h);
    throw;
  }
  return handles;
}

OpResult Runtime::release(int64_t handle) { return handles_.release(handle); }

void Runtime::stop(ErrorKind kind, const std::string& reason, bool quiet) {
  stop_locked(kind, reason, quiet);
  handles_.run_callbacks();  // outside state_mu_: a callback may queue again (and be refused)
}

void Runtime::stop_locked(ErrorKind kind, const std::string& reason, bool quiet) {
  std::lock_guard<std::mutex> lock(state_mu_);
  if (state_ == State::Stopped) return;
  state_ = State::Stopped;
  stop_kind_ = kind;
  stop_reason_ = reason;
  log_line(kind == ErrorKind::Shutdown || quiet ? LogLevel::Debug : LogLevel::Error, "stopped: " + reason);
  pending_.clear();
  // An operation queued after the caller named the unfinished ones (an
  // enqueue can slip in until state_mu_ is taken here) says which it is,
  // as one refused after the stop does.
  for (const Entry& e : queue_.take_all()) {
    if (reason.find("'" + e.req.name + "'") != std::string::npos) continue;
    handles_.fail(e.handle, kind, not_started(reason, e.req), false);
  }
  handles_.fail_all(kind, reason, false);
  // A failed job: GPU work waiting for a lost peer must not hold the
  // engine (a normal shutdown lets work in flight finish instead).
  if (kind != ErrorKind::Shutdown && executor_) executor_->abort();
  state_cv_.notify_all();
}

void Runtime::start_timeline(const std::string& path, bool mark_cycles) {
  if (path.empty()) throw_error(ErrorKind::BadArgument, "start_timeline: the path must not be empty");
  if (opts_.rank == 0) timeline_.start(path, mark_cycles);
}

void Runtime::stop_timeline() { timeline_.stop(); }

void Runtime::shutdown() {
  {
    std::unique_lock<std::mutex> lock(state_mu_);
    if (state_ == State::Created) {
      state_ = State::Stopped;
      stop_reason_ = "ring has been shut down";
      return;
    }
    shutdown_requested_.store(true);
    queue_.notify();
    // Every rank normally answers within a few cycles; a peer that cannot
    // answer is given the transport timeout before we stop waiting.
    auto deadline = std::chrono::duration<double>(config_.timeout_seconds + 5.0);
    if (!state_cv_.wait_for(lock, deadline, [&] { return state_ == State::Stopped; })) {
      lock.unlock();
      data_->abort("rank " + std::to_string(opts_.rank) + " gave up waiting for the others to shut down");
      control_->abort("rank " + std::to_string(opts_.rank) + " gave up waiting for the others to shut down");
    }
  }
  if (thread_.joinable()) thread_.join();
  timeline_.stop();
}

}  // namespace ring
