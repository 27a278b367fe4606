#include "engine/published.h"

#include <mutex>
#include <shared_mutex>

namespace ring {
namespace {

std::shared_mutex g_mu;
Runtime* g_runtime = nullptr;  // guarded by g_mu

}  // namespace

void publish_runtime(Runtime* rt) {
  std::unique_lock<std::shared_mutex> lock(g_mu);
  g_runtime = rt;
}

void withdraw_runtime(Runtime* rt) {
  std::unique_lock<std::shared_mutex> lock(g_mu);
  if (g_runtime == rt) g_runtime = nullptr;
}

void with_published_runtime(const std::function<void(Runtime*)>& fn) {
  std::shared_lock<std::shared_mutex> lock(g_mu);
  fn(g_runtime);
}

}  // namespace ring
