// ByteWriter / ByteReader: the little-endian encoding of every control
// message. The reader checks every length against what is left and against
// explicit limits before allocating, and throws RingError(Internal) on
// malformed input, so a corrupt frame is a clean error, never a crash.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/error.h"

namespace ring {

class ByteWriter {
 public:
  // Room for a typical control message up front: one allocation, not one
  // per doubling of a growing buffer.
  ByteWriter() { buf_.reserve(128); }
  void u8(uint8_t v) { buf_.push_back(v); }
  void u32(uint32_t v) { raw(&v, 4); }
  void i64(int64_t v) { raw(&v, 8); }
  void f64(double v) { raw(&v, 8); }
  void str(const std::string& s) {
    u32(static_cast<uint32_t>(s.size()));
    raw(s.data(), s.size());
  }
  void i64s(const std::vector<int64_t>& v) {
    u32(static_cast<uint32_t>(v.size()));
    for (int64_t x : v) i64(x);
  }
  void bytes(const std::vector<uint8_t>& v) {
    u32(static_cast<uint32_t>(v.size()));
    raw(v.data(), v.size());
  }
  std::vector<uint8_t>& buffer() { return buf_; }

 private:
  void raw(const void* p, size_t n) {
    const uint8_t* b = static_cast<const uint8_t*>(p);
    buf_.insert(buf_.end(), b, b + n);
  }
  std::vector<uint8_t> buf_;
};

class ByteReader {
 public:
  ByteReader(const uint8_t* data, size_t len) : p_(data), end_(data + len) {}
  explicit ByteReader(const std::vector<uint8_t>& v) : ByteReader(v.data(), v.size()) {}

  uint8_t u8() { uint8_t v; raw(&v, 1); return v; }
  uint32_t u32() { uint32_t v; raw(&v, 4); return v; }
  int64_t i64() { int64_t v; raw(&v, 8); return v; }
  double f64() { double v; raw(&v, 8); return v; }
  std::string str(size_t max_len = 1 << 16) {
    uint32_t n = count(max_len, 1);
    std::string s(reinterpret_cast<const char*>(p_), n);
    p_ += n;
    return s;
  }
  std::vector<int64_t> i64s(size_t max_len = 1 << 20) {
    uint32_t n = count(max_len, 8);
    std::vector<int64_t> v(n);
    for (auto& x : v) x = i64();
    return v;
  }
  std::vector<uint8_t> bytes(size_t max_len = 1 << 24) {
    uint32_t n = count(max_len, 1);
    std::vector<uint8_t> v(p_, p_ + n);
    p_ += n;
    return v;
  }
  // Reads an element count and checks it against the limit and the bytes left.
  uint32_t count(size_t max_len, size_t elem_bytes) {
    uint32_t n = u32();
    if (n > max_len || static_cast<size_t>(end_ - p_) < static_cast<size_t>(n) * elem_bytes)
      throw_error(ErrorKind::Internal, "malformed control message: length " + std::to_string(n) + " out of range");
    return n;
  }
  bool done() const { return p_ == end_; }
  void expect_done() const {
    if (!done()) throw_error(ErrorKind::Internal, "malformed control message: trailing bytes");
  }

 private:
  void raw(void* out, size_t n) {
    if (static_cast<size_t>(end_ - p_) < n) throw_error(ErrorKind::Internal, "malformed control message: truncated");
    std::memcpy(out, p_, n);
    p_ += n;
  }
  const uint8_t* p_;
  const uint8_t* end_;
};

}  // namespace ring
