// ring's collectives as one XLA FFI handler (collective_ffi.cc), built into
// every library that gives XLA ring's collectives: the extension module for
// JAX (jax.ffi.register_ffi_target, against jaxlib's FFI headers), and
// TensorFlow's op library for jit_compile (registered with TensorFlow's own
// XLA, against its headers). Each library links the handler to its engine
// by defining ring_xla_engine_api().
#pragma once

#include "frameworks/engine_api.h"
#include "xla/ffi/api/c_api.h"

// The custom-call target's name, in both registries.
#define RING_XLA_COLLECTIVE_TARGET "ring_collective"

// The handler for host memory (platform "cpu" in JAX, "Host" in XLA).
extern "C" XLA_FFI_Error* RingCollectiveCpu(XLA_FFI_CallFrame* call_frame);
// The handler for GPU memory (platform "CUDA"): XLA's stream and device go to the engine.
extern "C" XLA_FFI_Error* RingCollectiveCuda(XLA_FFI_CallFrame* call_frame);

namespace ring {
// The engine the handler queues into; null when none is reachable (the
// library was loaded without ring's engine). Defined by the library that
// compiles collective_ffi.cc; hidden, so two such libraries in one process
// keep their own.
__attribute__((visibility("hidden"))) const RingEngineApi* ring_xla_engine_api();
}  // namespace ring
