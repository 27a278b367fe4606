// The collectives on N ranks as threads, gloo-style: a parameter grid over
// wires (in-process, shared memory, TCP), world sizes, element counts,
// dtypes and ops, checked against references computed here.
//
// Inputs are chosen so the reference does not depend on reduction order:
// small integers for float sums, powers of two for float products, any
// values for min/max, anything for integers (wrap-around is order-free).
// Order itself is checked separately (allreduce_follows_ring_order,
// allreduce_is_deterministic) with random floats.
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "collectives/collectives.h"
#include "common/error.h"
#include "reduce/reduce.h"
#include "tests/fixture.h"
#include "tests/harness.h"

using ring::DataType;
using ring::Mesh;
using ring::ReduceOp;
using ring_test::Wire;

namespace {

using Bytes = std::vector<uint8_t>;

const DataType kAllTypes[] = {DataType::UInt8,   DataType::Int8,     DataType::Int16,   DataType::Int32,
                              DataType::Int64,   DataType::Float16,  DataType::BFloat16, DataType::Float32,
                              DataType::Float64, DataType::Bool};
const ReduceOp kAllOps[] = {ReduceOp::Sum, ReduceOp::Average, ReduceOp::Min, ReduceOp::Max, ReduceOp::Product};

uint64_t mix(uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
uint64_t hash3(uint64_t a, uint64_t b, uint64_t c) { return mix(a * 1000003u ^ mix(b * 7919u ^ mix(c))); }

bool is_float(DataType t) {
  return t == DataType::Float16 || t == DataType::BFloat16 || t == DataType::Float32 || t == DataType::Float64;
}

// ---- element access, by dtype -------------------------------------------------

double read_float(DataType t, const uint8_t* p, size_t i) {
  switch (t) {
    case DataType::Float32: { float f; std::memcpy(&f, p + 4 * i, 4); return f; }
    case DataType::Float64: { double d; std::memcpy(&d, p + 8 * i, 8); return d; }
    case DataType::Float16: { uint16_t h; std::memcpy(&h, p + 2 * i, 2); return ring::half_to_float(h); }
    default: { uint16_t h; std::memcpy(&h, p + 2 * i, 2); return ring::bfloat16_to_float(h); }
  }
}

void write_float(DataType t, uint8_t* p, size_t i, double v) {
  switch (t) {
    case DataType::Float32: { float f = static_cast<float>(v); std::memcpy(p + 4 * i, &f, 4); return; }
    case DataType::Float64: std::memcpy(p + 8 * i, &v, 8); return;
    case DataType::Float16: { uint16_t h = ring::float_to_half(static_cast<float>(v)); std::memcpy(p + 2 * i, &h, 2); return; }
    default: { uint16_t h = ring::float_to_bfloat16(static_cast<float>(v)); std::memcpy(p + 2 * i, &h, 2); return; }
  }
}

// Integers and bool, sign- or zero-extended to 64 bits.
int64_t read_int(DataType t, const uint8_t* p, size_t i) {
  switch (t) {
    case DataType::Int8: return static_cast<int8_t>(p[i]);
    case DataType::Int16: { int16_t v; std::memcpy(&v, p + 2 * i, 2); return v; }
    case DataType::Int32: { int32_t v; std::memcpy(&v, p + 4 * i, 4); return v; }
    case DataType::Int64: { int64_t v; std::memcpy(&v, p + 8 * i, 8); return v; }
    default: return p[i];  // UInt8, Bool
  }
}

void write_int(DataType t, uint8_t* p, size_t i, uint64_t v) {  // keeps the low bytes (little endian)
  size_t e = ring::dtype_size(t);
  std::memcpy(p + e * i, &v, e);
}

// ---- inputs and references -------------------------------------------------------

// Rank `rank`'s input for (dtype, op), `count` elements; `salt` varies cases.
Bytes make_input(int rank, DataType t, ReduceOp op, size_t count, uint64_t salt) {
  Bytes b(count * ring::dtype_size(t));
  static const double kProductFactors[] = {1, 2, -1, 0.5, -2, 1, -0.5};
  for (size_t i = 0; i < count; ++i) {
    uint64_t h = hash3(rank, i, salt);
    if (t == DataType::Bool) {
      bool and_op = op == ReduceOp::Min || op == ReduceOp::Product;
      write_int(t, b.data(), i, and_op ? (h % 8 != 0) : (h % 8 == 0));
      continue;
    }
    if (!is_float(t)) {
      write_int(t, b.data(), i, h);
      continue;
    }
    double v;
    if (op == ReduceOp::Sum || op == ReduceOp::Average) v = static_cast<int>(h % 17) - 8;
    else if (op == ReduceOp::Product) v = (h % 16 == 0) ? 0.0 : kProductFactors[(h >> 8) % 7];
    else v = (static_cast<int>(h % 2001) - 1000) / 4.0;
    write_float(t, b.data(), i, v);
  }
  return b;
}

// Reduction of the ranks' inputs, element by element, in rank order.
Bytes make_expected(const std::vector<Bytes>& inputs, DataType t, ReduceOp op, size_t count) {
  Bytes out(count * ring::dtype_size(t));
  const int n = static_cast<int>(inputs.size());
  for (size_t i = 0; i < count; ++i) {
    if (is_float(t)) {
      double acc = read_float(t, inputs[0].data(), i);
      for (int r = 1; r < n; ++r) {
        double v = read_float(t, inputs[r].data(), i);
        if (op == ReduceOp::Sum || op == ReduceOp::Average) acc += v;
        else if (op == ReduceOp::Product) acc *= v;
        else if (op == ReduceOp::Min) acc = std::min(acc, v);
        else acc = std::max(acc, v);
      }
      write_float(t, out.data(), i, acc);
    } else if (t == DataType::Bool) {
      bool and_op = op == ReduceOp::Min || op == ReduceOp::Product;
      bool acc = and_op;
      for (int r = 0; r < n; ++r) acc = and_op ? (acc && inputs[r][i]) : (acc || inputs[r][i]);
      write_int(t, out.data(), i, acc);
    } else {
      int64_t acc = read_int(t, inputs[0].data(), i);
      for (int r = 1; r < n; ++r) {
        int64_t v = read_int(t, inputs[r].data(), i);
        if (op == ReduceOp::Sum || op == ReduceOp::Average) acc = static_cast<int64_t>(uint64_t(acc) + uint64_t(v));
        else if (op == ReduceOp::Product) acc = static_cast<int64_t>(uint64_t(acc) * uint64_t(v));
        else if (op == ReduceOp::Min) acc = std::min(acc, v);
        else acc = std::max(acc, v);
        acc = read_int(t, reinterpret_cast<const uint8_t*>(&acc), 0);  // back to the type's range
      }
      write_int(t, out.data(), i, static_cast<uint64_t>(acc));
    }
  }
  return out;
}

// count split into n chunks, the first count % n one element longer.
std::vector<size_t> even_chunks(size_t count, int n) {
  std::vector<size_t> c(n, count / n);
  for (size_t r = 0; r < count % n; ++r) ++c[r];
  return c;
}

// Uneven split with some empty chunks.
std::vector<size_t> uneven_chunks(size_t count, int n, uint64_t salt) {
  std::vector<size_t> c(n, 0);
  for (size_t i = 0; i < count; ++i) {
    int r = static_cast<int>(hash3(salt, i / 97, 5) % n);
    if (r % 3 == 1) r = 0;  // leaves some chunks empty
    ++c[r];
  }
  return c;
}

std::string case_name(Wire w, int n, DataType t, ReduceOp op, size_t count) {
  return std::string(ring_test::wire_name(w)) + " n=" + std::to_string(n) + " " + ring::dtype_name(t) + " " +
         ring::reduce_op_name(op) + " count=" + std::to_string(count);
}

// ---- the grid ------------------------------------------------------------------

struct ReduceCase {
  DataType dtype;
  ReduceOp op;
  size_t count;
  std::vector<size_t> chunks;
  std::vector<Bytes> inputs;  // by rank
  Bytes expected;
};

std::vector<ReduceCase> reduce_cases(int n, const std::vector<size_t>& counts, const std::vector<DataType>& types,
                                     const std::vector<ReduceOp>& ops, bool uneven) {
  std::vector<ReduceCase> cases;
  uint64_t salt = 1;
  for (size_t count : counts)
    for (DataType t : types)
      for (ReduceOp op : ops) {
        ReduceCase c{t, op, count, uneven ? uneven_chunks(count, n, salt) : even_chunks(count, n), {}, {}};
        for (int r = 0; r < n; ++r) c.inputs.push_back(make_input(r, t, op, count, salt));
        c.expected = make_expected(c.inputs, t, op, count);
        cases.push_back(std::move(c));
        ++salt;
      }
  return cases;
}

// Runs every case as an allreduce (or reduce-scatter) on n ranks over w.
void run_reduce_cases(Wire w, int n, const std::vector<ReduceCase>& cases, bool reducescatter) {
  auto meshes = ring_test::make_meshes(w, n);
  ring_test::run_ranks(meshes, [&](Mesh& m) {
    for (const ReduceCase& c : cases) {
      Bytes buf = c.inputs[m.rank()];
      size_t esize = ring::dtype_size(c.dtype);
      if (reducescatter) {
        ring::ring_reducescatter(m, buf.data(), c.chunks, c.dtype, c.op);
        size_t begin = 0;
        for (int r = 0; r < m.rank(); ++r) begin += c.chunks[r];
        size_t len = c.chunks[m.rank()] * esize;
        if (len && std::memcmp(buf.data() + begin * esize, c.expected.data() + begin * esize, len) != 0)
          ring_test::record_failure(__FILE__, __LINE__,
                                    "reducescatter wrong on rank " + std::to_string(m.rank()) + ": " +
                                        case_name(w, n, c.dtype, c.op, c.count));
      } else {
        ring::ring_allreduce(m, buf.data(), c.chunks, c.dtype, c.op);
        if (buf != c.expected)
          ring_test::record_failure(__FILE__, __LINE__,
                                    "allreduce wrong on rank " + std::to_string(m.rank()) + ": " +
                                        case_name(w, n, c.dtype, c.op, c.count));
      }
    }
  });
}

void allreduce_grid(Wire w, const std::vector<int>& sizes) {
  std::vector<DataType> types(std::begin(kAllTypes), std::end(kAllTypes));
  std::vector<ReduceOp> ops(std::begin(kAllOps), std::end(kAllOps));
  for (int n : sizes) run_reduce_cases(w, n, reduce_cases(n, {0, 1, 7, 1001}, types, ops, false), false);
}

}  // namespace

// ---- allreduce ----------------------------------------------------------------------

TEST(allreduce_grid_inproc) { allreduce_grid(Wire::Inproc, {1, 2, 3, 5, 8}); }
TEST(allreduce_grid_shm) { allreduce_grid(Wire::Shm, {1, 2, 3, 5}); }
TEST(allreduce_grid_tcp) { allreduce_grid(Wire::Tcp, {1, 2, 3, 5}); }

TEST(allreduce_large) {
  // ~1M elements, a count that divides by no world size.
  const size_t count = (1 << 20) + 7;
  run_reduce_cases(Wire::Inproc, 2, reduce_cases(2, {count}, {DataType::Float32, DataType::Float16}, {ReduceOp::Sum}, false), false);
  run_reduce_cases(Wire::Inproc, 5, reduce_cases(5, {count}, {DataType::Float32}, {ReduceOp::Sum}, false), false);
  run_reduce_cases(Wire::Shm, 3, reduce_cases(3, {count}, {DataType::Float32, DataType::BFloat16}, {ReduceOp::Sum}, false), false);
  run_reduce_cases(Wire::Tcp, 2, reduce_cases(2, {count}, {DataType::Int32}, {ReduceOp::Product}, false), false);
}

TEST(allreduce_uneven_and_empty_chunks) {
  for (int n : {2, 3, 5, 8}) {
    auto cases = reduce_cases(n, {0, 1, 7, 1001, 30011}, {DataType::Float32, DataType::Int64, DataType::Float16},
                              {ReduceOp::Sum, ReduceOp::Max}, true);
    run_reduce_cases(Wire::Inproc, n, cases, false);
  }
}

TEST(allreduce_propagates_nan) {
  ring_test::run_ranks(3, [](Mesh& m) {
    std::vector<float> v = {1.0f, 2.0f, 3.0f, 4.0f};
    if (m.rank() == 1) v[2] = NAN;
    ring::ring_allreduce(m, v.data(), even_chunks(4, 3), DataType::Float32, ReduceOp::Max);
    CHECK(v[0] == 1.0f && v[1] == 2.0f && std::isnan(v[2]) && v[3] == 4.0f);
  });
}

namespace {

// Random floats: the result depends on the order of the additions.
std::vector<float> random_floats(int rank, size_t count, uint64_t salt) {
  std::vector<float> v(count);
  for (size_t i = 0; i < count; ++i)
    v[i] = static_cast<float>(static_cast<int64_t>(hash3(rank, i, salt) % 2000001) - 1000000) * 1.37e-3f;
  return v;
}

}  // namespace

TEST(allreduce_follows_ring_order) {
  // Chunk c is reduced in the order c+1, c+2, ..., c: own = own + received.
  for (int n : {2, 3, 5, 8}) {
    const size_t count = 4099;
    std::vector<size_t> chunks = even_chunks(count, n);
    std::vector<std::vector<float>> in(n);
    for (int r = 0; r < n; ++r) in[r] = random_floats(r, count, 77);
    std::vector<float> expected(count);
    size_t i = 0;
    for (int c = 0; c < n; ++c)
      for (size_t k = 0; k < chunks[c]; ++k, ++i) {
        float acc = in[(c + 1) % n][i];
        for (int j = 2; j <= n; ++j) acc = in[(c + j) % n][i] + acc;
        expected[i] = acc;
      }
    ring_test::run_ranks(n, [&](Mesh& m) {
      std::vector<float> buf = in[m.rank()];
      ring::ring_allreduce(m, buf.data(), chunks, DataType::Float32, ReduceOp::Sum);
      CHECK(std::memcmp(buf.data(), expected.data(), count * 4) == 0);
    });
  }
}

TEST(allreduce_is_deterministic) {
  // Twice on the same inputs: bitwise equal runs, bitwise equal ranks.
  for (Wire w : {Wire::Inproc, Wire::Shm}) {
    const int n = 5;
    const size_t count = 100003;
    std::vector<std::vector<float>> results(2 * n);
    auto meshes = ring_test::make_meshes(w, n);
    ring_test::run_ranks(meshes, [&](Mesh& m) {
      for (int run = 0; run < 2; ++run) {
        std::vector<float> buf = random_floats(m.rank(), count, 99);
        ring::ring_allreduce(m, buf.data(), even_chunks(count, n), DataType::Float32, ReduceOp::Average);
        results[run * n + m.rank()] = std::move(buf);
      }
    });
    for (auto& r : results) CHECK(std::memcmp(r.data(), results[0].data(), count * 4) == 0);
  }
}

TEST(allreduce_rejects_bad_chunk_counts) {
  ring_test::run_ranks(2, [](Mesh& m) {
    float x[2] = {1, 2};
    CHECK_THROWS_KIND(ring::ring_allreduce(m, x, {2}, DataType::Float32, ReduceOp::Sum), ring::ErrorKind::BadArgument);
    CHECK_THROWS_KIND(ring::ring_reducescatter(m, x, {1, 1, 0}, DataType::Float32, ReduceOp::Sum),
                      ring::ErrorKind::BadArgument);
  });
}

// ---- reduce-scatter ---------------------------------------------------------------------

TEST(reducescatter_grid) {
  for (Wire w : {Wire::Inproc, Wire::Shm, Wire::Tcp})
    for (int n : {1, 2, 3, 5, 8}) {
      if (w != Wire::Inproc && n == 8) continue;
      for (bool uneven : {false, true}) {
        auto cases = reduce_cases(n, {0, 1, 7, 1001}, {DataType::Float32, DataType::Int32, DataType::BFloat16},
                                  {ReduceOp::Sum, ReduceOp::Min, ReduceOp::Product}, uneven);
        run_reduce_cases(w, n, cases, true);
      }
    }
}

// ---- allgather --------------------------------------------------------------------------------

namespace {

uint8_t pattern(int a, int b, size_t j) { return static_cast<uint8_t>(hash3(a, b, j)); }

void allgather_case(Wire w, int n, const std::vector<size_t>& block_bytes) {
  std::vector<size_t> offset(n + 1, 0);
  for (int r = 0; r < n; ++r) offset[r + 1] = offset[r] + block_bytes[r];
  auto meshes = ring_test::make_meshes(w, n);
  ring_test::run_ranks(meshes, [&](Mesh& m) {
    Bytes buf(offset[n], 0xEE);
    for (size_t j = 0; j < block_bytes[m.rank()]; ++j) buf[offset[m.rank()] + j] = pattern(m.rank(), 0, j);
    ring::ring_allgather(m, buf.data(), block_bytes);
    for (int r = 0; r < n; ++r)
      for (size_t j = 0; j < block_bytes[r]; ++j)
        if (buf[offset[r] + j] != pattern(r, 0, j)) {
          ring_test::record_failure(__FILE__, __LINE__, std::string("allgather wrong over ") +
                                                            ring_test::wire_name(w) + " n=" + std::to_string(n) +
                                                            " block " + std::to_string(r));
          return;
        }
  });
}

}  // namespace

TEST(allgather_variable_blocks) {
  for (Wire w : {Wire::Inproc, Wire::Shm, Wire::Tcp})
    for (int n : {1, 2, 3, 5, 8}) {
      if (w != Wire::Inproc && n == 8) continue;
      std::vector<size_t> zeros(n, 0), ones(n, 1), mixed(n), big(n);
      for (int r = 0; r < n; ++r) {
        mixed[r] = (r % 3 == 1) ? 0 : 1 + (r * 37) % 1001;
        big[r] = (r == n / 2) ? 0 : 100000 + r * 4099;
      }
      for (const auto& blocks : {zeros, ones, mixed, big}) allgather_case(w, n, blocks);
    }
}

// ---- broadcast --------------------------------------------------------------------------------

TEST(broadcast_every_root) {
  // 1 MiB + 13 bytes spans several pipeline segments with a short last one.
  for (Wire w : {Wire::Inproc, Wire::Shm, Wire::Tcp})
    for (int n : {1, 2, 3, 5, 8}) {
      if (w != Wire::Inproc && n == 8) continue;
      auto meshes = ring_test::make_meshes(w, n);
      ring_test::run_ranks(meshes, [&](Mesh& m) {
        for (size_t bytes : {size_t(0), size_t(1), size_t(7), size_t(1001), size_t((1 << 20) + 13)}) {
          if (bytes > 4096 && n > 5 && w == Wire::Inproc) continue;
          for (int root = 0; root < n; ++root) {
            Bytes buf(bytes, 0xEE);
            if (m.rank() == root)
              for (size_t j = 0; j < bytes; ++j) buf[j] = pattern(root, 1, j);
            ring::broadcast(m, buf.data(), bytes, root);
            for (size_t j = 0; j < bytes; ++j)
              if (buf[j] != pattern(root, 1, j)) {
                ring_test::record_failure(__FILE__, __LINE__, std::string("broadcast wrong over ") +
                                                                  ring_test::wire_name(w) + " n=" +
                                                                  std::to_string(n) + " root " +
                                                                  std::to_string(root) + " bytes " +
                                                                  std::to_string(bytes));
                break;
              }
          }
        }
      });
    }
}

TEST(broadcast_rejects_bad_root) {
  ring_test::run_ranks(2, [](Mesh& m) {
    uint8_t b = 0;
    CHECK_THROWS_KIND(ring::broadcast(m, &b, 1, 2), ring::ErrorKind::BadArgument);
    CHECK_THROWS_KIND(ring::broadcast(m, &b, 1, -1), ring::ErrorKind::BadArgument);
  });
}

// ---- alltoall ---------------------------------------------------------------------------------

namespace {

// Bytes rank `from` sends to rank `to`; zero for some pairs.
size_t split_bytes(int from, int to, int variant) {
  if (variant == 0) return 0;
  if (variant == 1) return 3;
  uint64_t h = hash3(from, to, variant);
  return h % 4 == 0 ? 0 : 1 + h % 5000;
}

}  // namespace

TEST(alltoall_uneven_and_zero_splits) {
  for (Wire w : {Wire::Inproc, Wire::Shm, Wire::Tcp})
    for (int n : {1, 2, 3, 5, 8}) {
      if (w != Wire::Inproc && n == 8) continue;
      auto meshes = ring_test::make_meshes(w, n);
      ring_test::run_ranks(meshes, [&](Mesh& m) {
        const int r = m.rank();
        for (int variant : {0, 1, 2, 3}) {
          std::vector<size_t> send(n), recv(n);
          for (int p = 0; p < n; ++p) {
            send[p] = split_bytes(r, p, variant);
            recv[p] = split_bytes(p, r, variant);
          }
          Bytes sendbuf, recvbuf;
          for (int p = 0; p < n; ++p)
            for (size_t j = 0; j < send[p]; ++j) sendbuf.push_back(pattern(r * 100 + p, variant, j));
          size_t total = 0;
          for (size_t b : recv) total += b;
          recvbuf.assign(total, 0xEE);
          ring::alltoall(m, sendbuf.data(), send, recvbuf.data(), recv);
          size_t at = 0;
          bool ok = true;
          for (int p = 0; p < n; ++p)
            for (size_t j = 0; j < recv[p]; ++j) ok = ok && recvbuf[at++] == pattern(p * 100 + r, variant, j);
          if (!ok)
            ring_test::record_failure(__FILE__, __LINE__, std::string("alltoall wrong over ") +
                                                              ring_test::wire_name(w) + " n=" + std::to_string(n) +
                                                              " variant " + std::to_string(variant));
        }
      });
    }
}

TEST(alltoall_rejects_mismatched_self_block) {
  ring_test::run_ranks(2, [](Mesh& m) {
    uint8_t s[4] = {}, d[4] = {};
    CHECK_THROWS_KIND(ring::alltoall(m, s, {1, 1}, d, {2, 2}), ring::ErrorKind::BadArgument);
    CHECK_THROWS_KIND(ring::alltoall(m, s, {1}, d, {1, 1}), ring::ErrorKind::BadArgument);
  });
}

// ---- barrier ----------------------------------------------------------------------------------

TEST(barrier_waits_for_every_rank) {
  for (Wire w : {Wire::Inproc, Wire::Shm, Wire::Tcp})
    for (int n : {1, 2, 3, 5, 8}) {
      if (w != Wire::Inproc && n == 8) continue;
      const int rounds = 6;
      std::vector<std::atomic<int>> arrived(rounds);
      for (auto& a : arrived) a = 0;
      auto meshes = ring_test::make_meshes(w, n);
      ring_test::run_ranks(meshes, [&](Mesh& m) {
        for (int k = 0; k < rounds; ++k) {
          // The last rank to arrive changes from round to round.
          if (m.rank() == k % n) std::this_thread::sleep_for(std::chrono::milliseconds(3));
          arrived[k].fetch_add(1);
          ring::barrier(m);
          CHECK_EQ(arrived[k].load(), n);
        }
      });
    }
}

TEST(collectives_mixed_sequence) {
  // Different collectives back to back on the same channels keep their bytes apart.
  ring_test::run_ranks(3, [](Mesh& m) {
    for (int k = 0; k < 20; ++k) {
      ring::barrier(m);
      int32_t v[5] = {m.rank(), 1, 2, 3, k};
      ring::ring_allreduce(m, v, {2, 2, 1}, DataType::Int32, ReduceOp::Sum);
      CHECK(v[0] == 3 && v[1] == 3 && v[4] == 3 * k);
      uint8_t b = m.rank() == k % 3 ? static_cast<uint8_t>(k) : 0;
      ring::broadcast(m, &b, 1, k % 3);
      CHECK_EQ(static_cast<int>(b), k);
    }
  });
}

// Hierarchical allreduce: `hosts` x `per_host` ranks (host-major), sums of
// rank-dependent integers (exact in float32), out of place, with Average's
// scale; every rank must get the flat answer.
void hierarchical_case(Wire w, int hosts, int per_host, size_t count) {
  const int n = hosts * per_host;
  auto meshes = ring_test::make_meshes(w, n);
  ring_test::run_ranks(meshes, [&](Mesh& m) {
    auto [lm, cm] = ring_test::host_meshes(m, hosts, per_host);
    std::vector<float> in(count), out(count, -1.0f);
    for (size_t i = 0; i < count; ++i) in[i] = static_cast<float>((i % 7) + m.rank());
    std::vector<size_t> chunks(per_host);
    for (int c = 0; c < per_host; ++c) chunks[c] = count / per_host + (static_cast<size_t>(c) < count % per_host);
    ring::hierarchical_allreduce(*lm, *cm, ring::Parts(in.data(), out.data(), count * sizeof(float)), chunks, DataType::Float32, ReduceOp::Average,
                                 1.0 / n);
    for (size_t i = 0; i < count; ++i) {
      float expected = static_cast<float>((i % 7) * n + n * (n - 1) / 2) / n;
      if (out[i] != expected) {
        ring_test::record_failure(__FILE__, __LINE__,
                                  "hierarchical allreduce wrong on rank " + std::to_string(m.rank()) + " at " +
                                      std::to_string(i) + " (" + std::to_string(hosts) + "x" +
                                      std::to_string(per_host) + ", " + ring_test::wire_name(w) + ")");
        return;
      }
    }
  });
}

TEST(hierarchical_allreduce_matches_flat) {
  for (size_t count : {size_t(0), size_t(1), size_t(5), size_t(1001), size_t(65536)}) {
    hierarchical_case(Wire::Inproc, 2, 2, count);
    hierarchical_case(Wire::Inproc, 3, 2, count);
    hierarchical_case(Wire::Inproc, 2, 3, count);
    hierarchical_case(Wire::Inproc, 1, 4, count);
    hierarchical_case(Wire::Inproc, 4, 1, count);
  }
  hierarchical_case(Wire::Shm, 2, 2, 100003);
  hierarchical_case(Wire::Tcp, 2, 2, 100003);
}

TEST(subgroup_shares_abort_with_its_parent) {
  auto meshes = ring_test::make_inproc_meshes(2);
  auto sub = meshes[0]->subgroup({0, 1});
  meshes[0]->abort("test abort");
  float x = 0;
  CHECK_THROWS_KIND(sub->send(1, &x, sizeof(x)), ring::ErrorKind::PeerFailure);
}
