// Adasum allreduce: adaptive summation (Maleki et al., "Scaling Distributed
// Training with Adaptive Summation", 2021) by recursive vector halving and
// distance doubling over n = 2^k ranks.
//
// The reduction is a binary tree over the ranks: ranks that differ only in
// bit 0 are combined first, then the pairs that differ in bit 1, and so on,
// so the result is combine(adasum(ranks 0..n/2-1), adasum(ranks n/2..n-1))
// applied recursively, with, per tensor,
//
//   combine(a, b) = (1 - a.b / (2 |a|^2)) a + (1 - a.b / (2 |b|^2)) b
//
// and a coefficient of 1 for a side whose |x|^2 is 0 (so 0/0 never occurs:
// a zero vector adds nothing and the other side passes through).
//
//   1. Halving, level b = 0..k-1, partner = rank ^ 2^b: each rank holds a
//      slice of every tensor (its "range"); it keeps one half of it (the
//      lower half when bit b of its rank is 0), sends the other half to the
//      partner and receives the partner's copy of the half it keeps. Its
//      partial dot product and squared norms per tensor (in double) are
//      summed over the 2^(b+1) ranks that hold the pieces of the tensor at
//      this level (recursive doubling over bits 0..b), so the coefficients
//      are those of the whole tensor; then it combines the two halves.
//   2. Doubling back, level b = k-1..0: partners swap their ranges, so every
//      rank ends with the whole result (copies only).
//
// Layout: the tensors are packed into one buffer by "slot": slot p holds,
// for every tensor, the piece that rank bitreverse(p) owns after the last
// halving. Then every range a rank holds is a contiguous run of slots, and
// every tensor is split exactly as if it were reduced alone, so results do
// not depend on what was fused with it. For one tensor the packing is the
// identity and the reduction runs in place.
//
// Each element of a level's result is computed by one rank and the scalar
// sums are exact mirrors on both sides of every exchange (a + b == b + a),
// so every rank ends with the same bits.
#include <cstring>
#include <string>

#include "collectives/collectives.h"
#include "common/error.h"
#include "reduce/half.h"

namespace ring {
namespace {

int log2_exact(int n) {
  int k = 0;
  while ((1 << k) < n) ++k;
  if ((1 << k) != n)
    throw_error(ErrorKind::BadArgument, "Adasum needs a power-of-two number of ranks (1, 2, 4, 8, ...), got " +
                                            std::to_string(n));
  return k;
}

int bit_reverse(int v, int bits) {
  int r = 0;
  for (int i = 0; i < bits; ++i) r |= ((v >> i) & 1) << (bits - 1 - i);
  return r;
}

// The slice [begin, end) of a tensor of `count` elements that `rank` owns
// after all k halvings: level b keeps the lower half (floor) when bit b of
// the rank is 0, else the upper half.
void leaf_range(size_t count, int rank, int k, size_t& begin, size_t& end) {
  begin = 0;
  end = count;
  for (int b = 0; b < k; ++b) {
    size_t mid = begin + (end - begin) / 2;
    if ((rank >> b) & 1) begin = mid;
    else end = mid;
  }
}

// Where each tensor's pieces sit in the packed buffer (elements).
struct Layout {
  int n = 1, k = 0;
  size_t tensors = 0;
  std::vector<size_t> src;       // [p * tensors + t]: offset of the piece within tensor t
  std::vector<size_t> len;       // [p * tensors + t]: its element count
  std::vector<size_t> pos;       // [p * tensors + t]: its offset in the buffer
  std::vector<size_t> slot;      // [p]: first element of slot p; slot[n] = total
  size_t at(int p, size_t t) const { return static_cast<size_t>(p) * tensors + t; }
};

Layout make_layout(int n, int k, const std::vector<size_t>& counts) {
  Layout L;
  L.n = n;
  L.k = k;
  L.tensors = counts.size();
  L.src.resize(n * counts.size());
  L.len.resize(n * counts.size());
  L.pos.resize(n * counts.size());
  L.slot.assign(n + 1, 0);
  size_t pos = 0;
  for (int p = 0; p < n; ++p) {
    L.slot[p] = pos;
    for (size_t t = 0; t < counts.size(); ++t) {
      size_t b, e;
      leaf_range(counts[t], bit_reverse(p, k), k, b, e);
      L.src[L.at(p, t)] = b;
      L.len[L.at(p, t)] = e - b;
      L.pos[L.at(p, t)] = pos;
      pos += e - b;
    }
  }
  L.slot[n] = pos;
  return L;
}

// Element access in double for each floating dtype.
struct F32 {
  static double get(const uint8_t* p, size_t i) { float f; std::memcpy(&f, p + 4 * i, 4); return f; }
  static void put(uint8_t* p, size_t i, double v) { float f = static_cast<float>(v); std::memcpy(p + 4 * i, &f, 4); }
};
struct F64 {
  static double get(const uint8_t* p, size_t i) { double d; std::memcpy(&d, p + 8 * i, 8); return d; }
  static void put(uint8_t* p, size_t i, double v) { std::memcpy(p + 8 * i, &v, 8); }
};
struct F16 {
  static double get(const uint8_t* p, size_t i) { uint16_t h; std::memcpy(&h, p + 2 * i, 2); return half_to_float_inline(h); }
  static void put(uint8_t* p, size_t i, double v) { uint16_t h = float_to_half_inline(static_cast<float>(v)); std::memcpy(p + 2 * i, &h, 2); }
};
struct BF16 {
  static double get(const uint8_t* p, size_t i) { uint16_t h; std::memcpy(&h, p + 2 * i, 2); return bfloat16_to_float_inline(h); }
  static void put(uint8_t* p, size_t i, double v) { uint16_t h = float_to_bfloat16_inline(static_cast<float>(v)); std::memcpy(p + 2 * i, &h, 2); }
};

class Adasum {
 public:
  Adasum(Mesh& mesh, const Layout& layout, uint8_t* buf, DataType dtype)
      : mesh_(mesh), L_(layout), buf_(buf), dtype_(dtype), esize_(dtype_size(dtype)) {}

  void run() {
    const int r = mesh_.rank();
    for (int b = 0; b < L_.k; ++b) {
      int first, width;
      held_slots(b, first, width);
      const int half = width / 2;
      const bool upper = (r >> b) & 1;
      const int keep = upper ? first + half : first, give = upper ? first : first + half;
      const size_t keep_n = L_.slot[keep + half] - L_.slot[keep];
      const size_t give_n = L_.slot[give + half] - L_.slot[give];
      recv_.resize(keep_n * esize_);
      mesh_.sendrecv(r ^ (1 << b), buf_ + L_.slot[give] * esize_, give_n * esize_, r ^ (1 << b), recv_.data(),
                     keep_n * esize_);
      switch (dtype_) {
        case DataType::Float32: level<F32>(b, keep, half, upper); break;
        case DataType::Float64: level<F64>(b, keep, half, upper); break;
        case DataType::Float16: level<F16>(b, keep, half, upper); break;
        default: level<BF16>(b, keep, half, upper); break;
      }
    }
    for (int b = L_.k - 1; b >= 0; --b) {
      int first, width;
      held_slots(b, first, width);
      const int half = width / 2;
      const bool upper = (r >> b) & 1;
      const int mine = upper ? first + half : first, theirs = upper ? first : first + half;
      mesh_.sendrecv(r ^ (1 << b), buf_ + L_.slot[mine] * esize_, (L_.slot[mine + half] - L_.slot[mine]) * esize_,
                     r ^ (1 << b), buf_ + L_.slot[theirs] * esize_,
                     (L_.slot[theirs + half] - L_.slot[theirs]) * esize_);
    }
  }

 private:
  // The slots [first, first + width) this rank holds before halving level b
  // (decided by bits 0..b-1 of its rank, which lead the slot index).
  void held_slots(int b, int& first, int& width) const {
    first = bit_reverse(mesh_.rank() & ((1 << b) - 1), L_.k);
    width = L_.n >> b;
  }

  // One halving level on the kept slots [keep, keep + half): own values in
  // buf_, the partner's in recv_ (same packing). `upper`: this rank is on
  // the side whose bit b is 1.
  template <class T>
  void level(int b, int keep, int half, bool upper) {
    const size_t nt = L_.tensors;
    const size_t base = L_.slot[keep];
    // Per tensor: dot, |lower side|^2, |upper side|^2.
    std::vector<double> s(3 * nt, 0.0);
    for (int p = keep; p < keep + half; ++p)
      for (size_t t = 0; t < nt; ++t) {
        const size_t at = L_.pos[L_.at(p, t)], len = L_.len[L_.at(p, t)];
        double dot = 0, own = 0, other = 0;
        for (size_t i = 0; i < len; ++i) {
          const double x = T::get(buf_, at + i), y = T::get(recv_.data(), at - base + i);
          dot += x * y;
          own += x * x;
          other += y * y;
        }
        s[3 * t] += dot;
        s[3 * t + (upper ? 2 : 1)] += own;
        s[3 * t + (upper ? 1 : 2)] += other;
      }
    sum_scalars(b, s);
    for (size_t t = 0; t < nt; ++t) {
      const double lower_c = s[3 * t + 1] == 0 ? 1.0 : 1.0 - s[3 * t] / (2 * s[3 * t + 1]);
      const double upper_c = s[3 * t + 2] == 0 ? 1.0 : 1.0 - s[3 * t] / (2 * s[3 * t + 2]);
      const double own_c = upper ? upper_c : lower_c, other_c = upper ? lower_c : upper_c;
      for (int p = keep; p < keep + half; ++p) {
        const size_t at = L_.pos[L_.at(p, t)], len = L_.len[L_.at(p, t)];
        for (size_t i = 0; i < len; ++i)
          T::put(buf_, at + i, own_c * T::get(buf_, at + i) + other_c * T::get(recv_.data(), at - base + i));
      }
    }
  }

  // Sums `s` over the 2^(b+1) ranks that share this rank's bits above b
  // (recursive doubling over bits 0..b; every rank gets the same bits).
  void sum_scalars(int b, std::vector<double>& s) {
    std::vector<double> in(s.size());
    const size_t bytes = s.size() * sizeof(double);
    for (int j = 0; j <= b; ++j) {
      const int peer = mesh_.rank() ^ (1 << j);
      mesh_.sendrecv(peer, s.data(), bytes, peer, in.data(), bytes);
      for (size_t i = 0; i < s.size(); ++i) s[i] += in[i];
    }
  }

  Mesh& mesh_;
  const Layout& L_;
  uint8_t* buf_;
  DataType dtype_;
  size_t esize_;
  std::vector<uint8_t> recv_;
};

}  // namespace

void adasum_allreduce(Mesh& mesh, const std::vector<void*>& tensors, const std::vector<size_t>& counts,
                      DataType dtype) {
  if (!is_floating(dtype))
    throw_error(ErrorKind::BadArgument, std::string("Adasum needs a floating-point dtype (float16, bfloat16, "
                                                    "float32, float64), got ") + dtype_name(dtype));
  if (tensors.size() != counts.size())
    throw_error(ErrorKind::BadArgument, "adasum_allreduce: " + std::to_string(tensors.size()) + " tensors, " +
                                            std::to_string(counts.size()) + " counts");
  const int k = log2_exact(mesh.size());
  if (k == 0 || tensors.empty()) return;
  const Layout layout = make_layout(mesh.size(), k, counts);
  const size_t esize = dtype_size(dtype);
  if (tensors.size() == 1) return Adasum(mesh, layout, static_cast<uint8_t*>(tensors[0]), dtype).run();
  std::vector<uint8_t> packed(layout.slot[layout.n] * esize);
  auto copy = [&](bool in) {
    for (int p = 0; p < layout.n; ++p)
      for (size_t t = 0; t < tensors.size(); ++t) {
        const size_t i = layout.at(p, t), bytes = layout.len[i] * esize;
        uint8_t* tensor = static_cast<uint8_t*>(tensors[t]) + layout.src[i] * esize;
        uint8_t* slot = packed.data() + layout.pos[i] * esize;
        if (bytes) std::memcpy(in ? slot : tensor, in ? tensor : slot, bytes);
      }
  };
  copy(true);
  Adasum(mesh, layout, packed.data(), dtype).run();
  copy(false);
}

}  // namespace ring
