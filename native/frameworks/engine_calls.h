// The C++ side of the framework entry points: what engine_api.cc's C
// functions and the XLA FFI handlers (frameworks/jax/) share.
#pragma once

#include <cstdint>
#include <functional>

#include "common/error.h"
#include "engine/handle_table.h"
#include "frameworks/engine_api.h"

namespace ring {

class Runtime;

// The one RingEngineApi of this process (static storage).
const RingEngineApi* engine_api();
// Calls fn(result, nullptr) or fn(nullptr, error) once `handle` has
// finished, after releasing it (Runtime::on_finish's threads and rules).
void on_result(Runtime& rt, int64_t handle, std::function<void(const OpResult*, const RingError*)> fn);
// A RingQuery's value on `rt`; BadArgument for an unknown query or set.
int64_t query(Runtime& rt, int32_t what, int32_t process_set);
// What RingEngineApi.signals calls (the Python binding sets it once; until
// then every question answers 0).
void set_signals_hook(int32_t (*hook)(int32_t what));

}  // namespace ring
