// A minimal test harness: TEST(name) registers a function, CHECK* record
// failures with file and line, main() in harness.cc runs every test whose
// name contains argv[1] (all when absent) and exits non-zero on failure.
#pragma once

#include <functional>
#include <sstream>
#include <string>

namespace ring_test {

void register_test(const char* name, std::function<void()> fn);
void record_failure(const char* file, int line, const std::string& what);

struct Registrar {
  Registrar(const char* name, std::function<void()> fn) { register_test(name, std::move(fn)); }
};

}  // namespace ring_test

#define RING_TEST_CAT2(a, b) a##b
#define RING_TEST_CAT(a, b) RING_TEST_CAT2(a, b)
#define TEST(name)                                                                          \
  static void RING_TEST_CAT(test_fn_, name)();                                              \
  static ::ring_test::Registrar RING_TEST_CAT(test_reg_, name)(#name, RING_TEST_CAT(test_fn_, name)); \
  static void RING_TEST_CAT(test_fn_, name)()

#define CHECK(cond)                                                        \
  do {                                                                     \
    if (!(cond)) ::ring_test::record_failure(__FILE__, __LINE__, #cond);   \
  } while (0)

#define CHECK_EQ(a, b)                                                                   \
  do {                                                                                   \
    auto _va = (a);                                                                      \
    auto _vb = (b);                                                                      \
    if (!(_va == _vb)) {                                                                 \
      std::ostringstream _os;                                                            \
      _os << #a " == " #b " (" << _va << " vs " << _vb << ")";                           \
      ::ring_test::record_failure(__FILE__, __LINE__, _os.str());                        \
    }                                                                                    \
  } while (0)

// Expects `stmt` to throw ring::RingError of kind `k`.
#define CHECK_THROWS_KIND(stmt, k)                                                       \
  do {                                                                                   \
    bool _thrown = false;                                                                \
    try {                                                                                \
      stmt;                                                                              \
    } catch (const ::ring::RingError& _e) {                                              \
      _thrown = _e.kind() == (k);                                                        \
    }                                                                                    \
    if (!_thrown) ::ring_test::record_failure(__FILE__, __LINE__, "expected throw: " #stmt); \
  } while (0)
