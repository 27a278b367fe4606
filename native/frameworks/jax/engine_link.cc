// The extension's side of the shared XLA FFI handler (frameworks/xla/):
// JAX's calls of "ring_collective" queue into this module's engine.
#include "frameworks/engine_calls.h"
#include "frameworks/xla/collective_ffi.h"

namespace ring {
const RingEngineApi* ring_xla_engine_api() { return engine_api(); }
}  // namespace ring
