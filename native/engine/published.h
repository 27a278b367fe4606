// The runtime a process's front end started last, published for framework
// operations that reach the engine without going through Python
// (frameworks/engine_api.h, XLA FFI handlers). The binding publishes a
// runtime once it runs and withdraws it at shutdown; a runtime withdraws
// itself when destroyed. Users hold the registry's shared lock for the
// length of each call, so a runtime is never destroyed under one.
#pragma once

#include <functional>

namespace ring {

class Runtime;

// Makes `rt` the published runtime (replacing any other).
void publish_runtime(Runtime* rt);
// Withdraws `rt` if it is the published one; waits for calls using it.
void withdraw_runtime(Runtime* rt);
// Calls fn(published runtime or null) under the registry's shared lock:
// fn must not publish or withdraw, and must not wait for ring operations.
void with_published_runtime(const std::function<void(Runtime*)>& fn);

}  // namespace ring
