/* The engine's C interface for framework operations built outside the
 * extension module: TensorFlow op kernels compiled against the installed
 * TensorFlow (frameworks/tensorflow/), and anything else that cannot link
 * the engine's C++ types. Plain C types only, so the two sides may be built
 * by different compilers, flags and C++ ABIs.
 *
 * The extension publishes one RingEngineApi (ring_strategy._native
 * .engine_api_address()); the framework library is handed its address once
 * after loading and checks `version` and `size` before any call. Every call
 * reaches the runtime the front end started last (init() to shutdown()),
 * and fails with RING_ERROR_SHUTDOWN when there is none. Codes (operations,
 * dtypes, reduce ops, devices, error kinds) are the engine's own enums,
 * exported by the binding.
 */
#ifndef RING_FRAMEWORKS_ENGINE_API_H_
#define RING_FRAMEWORKS_ENGINE_API_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RING_ENGINE_API_VERSION 1
/* error kind passed to RingDone on success (others: common/error.h's ErrorKind) */
#define RING_OK (-1)
#define RING_ERROR_SHUTDOWN 5
/* RingEngineApi.signals' questions */
#define RING_SIGNALS_ASK 0
#define RING_SIGNALS_RUN 1

/* One operation to queue. Memory is the caller's and must stay valid (and,
 * for the output, unread) until its RingDone has been called. */
typedef struct RingOpArgs {
  const char* name;        /* unique among this rank's operations in flight */
  int32_t op;              /* OpType */
  int32_t dtype;           /* DataType */
  int32_t reduce_op;       /* ReduceOp (reductions) */
  int32_t root;            /* broadcast: the root's global rank */
  double prescale;         /* reductions: input factor (1.0: none) */
  double postscale;        /* reductions: result factor (1.0: none) */
  const int64_t* shape;    /* ndim dimensions of the input */
  int32_t ndim;
  const int64_t* splits;   /* alltoall: rows for each rank of the set */
  int32_t nsplits;
  int32_t device_type;     /* DeviceType: 0 host memory, 1 CUDA */
  int32_t device_index;
  uint64_t stream;         /* CUDA: the CUstream that produced the input (0: legacy default) */
  int32_t process_set;     /* its id; 0: every rank */
  const void* input;
  size_t input_bytes;      /* checked against shape and dtype */
  void* output;            /* allreduce, broadcast: the result's memory; NULL: the engine allocates */
  size_t output_bytes;
} RingOpArgs;

/* What a finished operation gave back, valid only during its RingDone call. */
typedef struct RingResult {
  const void* data;             /* a result the engine allocated in host memory, or NULL */
  size_t nbytes;
  const void* device_data;      /* a result the engine allocated in GPU memory (CUdeviceptr), or NULL */
  size_t device_bytes;
  const int64_t* shape;         /* the result's shape (allgather, alltoall, reducescatter) */
  int32_t ndim;
  const int64_t* received_splits; /* alltoall: rows received from each rank */
  int32_t nsplits;
} RingResult;

/* Called once per queued operation, on the engine's thread (or the caller's
 * when it finished already): error_kind RING_OK with `result`, or an error
 * kind with its message and a NULL result. It must not block on another
 * ring operation. */
typedef void (*RingDone)(void* ctx, int32_t error_kind, const char* message, const RingResult* result);

/* What RingEngineApi.query reports. */
enum RingQuery {
  RING_QUERY_RANK = 0,
  RING_QUERY_SIZE = 1,
  RING_QUERY_LOCAL_RANK = 2,
  RING_QUERY_LOCAL_SIZE = 3,
  RING_QUERY_SET_SIZE = 4,      /* ranks of process set `process_set` */
  RING_QUERY_SET_RANK = 5,      /* this rank's index in it, -1 when not a member */
  RING_QUERY_CROSS_RANK = 6,
  RING_QUERY_CROSS_SIZE = 7,
};

typedef struct RingEngineApi {
  uint32_t version; /* RING_ENGINE_API_VERSION */
  uint32_t size;    /* sizeof(RingEngineApi) */
  /* Queues ops[0..n) as one group (validated together: on refusal nothing
   * is queued). Returns RING_OK and calls done(ctxs[i], ...) once for each
   * op; or returns the error kind, with its message in error[0..error_len),
   * and calls nothing. Does not block on the network. */
  int32_t (*enqueue)(const RingOpArgs* ops, int32_t n, RingDone done, void* const* ctxs, char* error,
                     size_t error_len);
  /* *value = the queried number; returns RING_OK or an error kind (message
   * as for enqueue). */
  int32_t (*query)(int32_t what, int32_t process_set, int64_t* value, char* error, size_t error_len);
  /* Appended (a library that needs it checks that `size` covers it):
   * queues a copy of `bytes` from `src` (GPU memory, or host memory) into
   * `dst` (GPU memory of GPU `device`) on `stream` (a CUstream; 0: the
   * legacy default) and returns without waiting for it, except that a copy
   * from pageable host memory returns once `src` has been read. A RingDone
   * calls it to move a result the engine allocated (RingResult.device_data
   * or .data) into the caller's memory, in order on the caller's stream,
   * before the result is released (the engine reuses device_data's memory
   * only after the work queued on that stream by then). Returns RING_OK or
   * an error kind (message as for enqueue). */
  int32_t (*copy_to_device)(int32_t device, uint64_t stream, void* dst, const void* src, size_t bytes, char* error,
                            size_t error_len);
  /* Appended: enqueue() for a caller whose consumers are ordered by each
   * op's `stream`, not by done (XLA's FFI handlers): an op in GPU memory
   * that runs on NCCL completes as soon as the engine has queued its GPU
   * work and made `stream` wait for that work's event, as every such op
   * does under RING_ENABLE_ASYNC_COMPLETION=1; others complete as with
   * enqueue(). A result the engine allocated (device_data) is then being
   * written on the engine's stream: copy it on `stream` (copy_to_device). */
  int32_t (*enqueue_stream_ordered)(const RingOpArgs* ops, int32_t n, RingDone done, void* const* ctxs, char* error,
                                    size_t error_len);
  /* Appended: Python's signals for a kernel that waits on the thread that
   * called it (TensorFlow runs an eager op's kernel on the Python thread and
   * blocks that thread until done() is called, where no signal handler can
   * run). RING_SIGNALS_ASK: nonzero when the calling thread is in a front-end
   * call that answers signals while it waits (ring_strategy marks it); the
   * kernel may then wait for its operations itself. RING_SIGNALS_RUN (on such
   * a thread): runs Python's signal handlers; nonzero when one raised: the
   * exception is kept and raised by the front end once the call returns, and
   * the kernel stops waiting (its operations finish unseen; it must keep
   * their memory alive). 0 where no Python front end is loaded. */
  int32_t (*signals)(int32_t what);
} RingEngineApi;

#ifdef __cplusplus
}
#endif

#endif /* RING_FRAMEWORKS_ENGINE_API_H_ */
