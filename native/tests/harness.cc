#include "tests/harness.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <vector>

namespace ring_test {
namespace {

struct Test {
  const char* name;
  std::function<void()> fn;
};

std::vector<Test>& registry() {
  static std::vector<Test> tests;
  return tests;
}

std::mutex failure_mu;
std::atomic<int> failures{0};

}  // namespace

void register_test(const char* name, std::function<void()> fn) { registry().push_back({name, std::move(fn)}); }

void record_failure(const char* file, int line, const std::string& what) {
  std::lock_guard<std::mutex> lock(failure_mu);
  if (failures.fetch_add(1) < 50) std::fprintf(stderr, "  FAIL %s:%d: %s\n", file, line, what.c_str());
}

}  // namespace ring_test

int main(int argc, char** argv) {
  using namespace ring_test;
  std::string filter = argc > 1 ? argv[1] : "";
  int failed_tests = 0, ran = 0;
  for (auto& t : registry()) {
    if (!filter.empty() && std::string(t.name).find(filter) == std::string::npos) continue;
    int before = failures.load();
    auto start = std::chrono::steady_clock::now();
    try {
      t.fn();
    } catch (const std::exception& e) {
      record_failure(t.name, 0, std::string("uncaught exception: ") + e.what());
    }
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    bool ok = failures.load() == before;
    std::printf("%s %s (%.0f ms)\n", ok ? "ok  " : "FAIL", t.name, ms);
    std::fflush(stdout);
    failed_tests += ok ? 0 : 1;
    ++ran;
  }
  std::printf("%d tests, %d failed\n", ran, failed_tests);
  return failed_tests == 0 && ran > 0 ? 0 : 1;
}
