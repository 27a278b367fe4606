// Backend: one way of executing responses, e.g. the ring over host memory
// (backends/cpu_ring/cpu_ring.h). The Executor holds an ordered list of backends and
// runs each Execute response on the first one enabled for it, so a backend
// for another device (GPU memory on the engine's own streams, host-staged
// GPU) or a special case of an operation (small messages) is added beside
// the others, ahead of the ones it should win over. The coordinator never
// knows which backend runs a response: every rank chooses the same one
// because it decides from the response alone.
#pragma once

#include <vector>

#include "common/device.h"
#include "engine/message.h"
#include "engine/tensor_queue.h"

namespace ring {

class Backend {
 public:
  virtual ~Backend() = default;

  // Names the backend in logs and errors, e.g. "cpu ring". Static storage.
  virtual const char* name() const = 0;

  // True when this backend runs some operations on tensors in `device`'s
  // memory: requests on a device no backend serves are refused at enqueue.
  // Non-blocking, no side effects; called on callers' threads at the same
  // time as execute() runs on the background thread.
  virtual bool serves(const Device& device) const = 0;

  // Called at enqueue, on the caller's thread, by the first backend that
  // serves e.req.device: a GPU backend records in e.ready when the input,
  // produced on the caller's `stream`, will be ready. Throws RingError.
  virtual void prepare(Entry& e, uint64_t stream) {
    (void)e;
    (void)stream;
  }

  // True when this backend runs `r`, an Execute response (decided from
  // r.device, r.op and what else `r` says; every rank must decide alike).
  // Non-blocking, no side effects; called on the background thread.
  virtual bool enabled(const Response& r) const = 0;

  // Runs `r` on this rank and completes every entry's handle with its
  // result. entries[i] is this rank's tensor names[i]; an entry with
  // handle 0 stands in for a name this rank (having joined) never
  // submitted: its req describes the tensor, input and output are null,
  // and the backend contributes zeros of that size.
  //
  // Blocks until this rank's part of the operation is done: when it
  // returns, every handle is completed (or, for a backend that completes
  // asynchronously, will be without further calls). Memory: inputs and
  // outputs belong to the front end and stay valid until their handle
  // completes; a result the backend allocates is handed over in
  // OpResult::data; scratch memory (fusion buffers, stand-in zeros) is the
  // backend's own. Throws RingError when the transport fails; the runtime
  // then fails every handle not yet completed.
  virtual void execute(const Response& r, std::vector<Entry>& entries) = 0;

  // The job failed (a lost peer, a timeout) and its handles were failed:
  // stop waiting for work in flight (e.g. abort NCCL communicators, whose
  // kernels would wait for the lost peer forever). Called once, on any
  // thread, possibly while execute() runs.
  virtual void abort() {}
  // Throws RingError for a failure of work that completes off the
  // background thread (its handles already failed), so that the runtime
  // ends the job on every rank with it. Called at every step of the
  // engine, by the thread driving it (one at a time): cheap when nothing
  // failed.
  virtual void check() {}
  // Process set `serial` (ProcessSet::serial) was removed, with none of its
  // operations in flight on this rank: release what is kept for it (e.g.
  // NCCL communicators), now or at a later check(). Any thread.
  virtual void forget_set(uint64_t serial) { (void)serial; }
  // The job ends in order (this rank or a peer called shutdown()) after
  // every rank ran the same responses: waits, at most `timeout_seconds`,
  // for the work this backend completes off the background thread, so
  // that work already queued everywhere completes instead of failing.
  // The background thread.
  virtual void settle(double timeout_seconds) { (void)timeout_seconds; }
};

}  // namespace ring
