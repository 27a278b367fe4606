// Parts: the buffer a reducing collective works on, made of parts laid end
// to end. Part i covers bytes [start_i, start_i + len_i) of the buffer; the
// collective reads them from in_i and writes the result to out_i (in_i may
// equal out_i: in place). A contiguous buffer is one part; a fused
// allreduce's tensors are many, so the collective sends from and reduces
// into the tensors themselves (gather sends, scattered writes) instead of
// copying them into a fusion buffer and back.
//
// Offsets and lengths are in bytes of the whole buffer. Parts never split
// an element (every part is a whole number of elements), so a range that
// is a whole number of elements visits whole elements only.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "transport/channel.h"

namespace ring {

class Parts {
 public:
  Parts() = default;
  Parts(const void* in, void* out, size_t len) { add(in, out, len); }

  // Appends a part; an empty one is skipped, and one that continues the
  // last part in both its input and its output memory extends it.
  void add(const void* in, void* out, size_t len) {
    if (len == 0) return;
    const uint8_t* i = static_cast<const uint8_t*>(in);
    uint8_t* o = static_cast<uint8_t*>(out);
    if (!parts_.empty()) {
      Part& last = parts_.back();
      if (last.in + last.len == i && last.out + last.len == o) {
        last.len += len;
        bytes_ += len;
        return;
      }
    }
    parts_.push_back({i, o, bytes_, len});
    bytes_ += len;
  }

  size_t bytes() const { return bytes_; }
  size_t count() const { return parts_.size(); }

  // Calls f(const uint8_t* in, uint8_t* out, size_t at, size_t n) for each
  // part's share of [off, off + len), in order; `at` counts from off.
  template <class F>
  void visit(size_t off, size_t len, F&& f) const {
    if (len == 0) return;
    size_t i = first_at(off);
    for (size_t done = 0; done < len; ++i) {
      const Part& p = parts_[i];
      const size_t skip = off + done - p.start;
      const size_t n = std::min(p.len - skip, len - done);
      f(p.in + skip, p.out + skip, done, n);
      done += n;
    }
  }

  // The input (or, `output` set, the output) memory of [off, off + len),
  // as the pieces of one gather send.
  std::vector<Piece> pieces(size_t off, size_t len, bool output) const {
    std::vector<Piece> out;
    visit(off, len, [&](const uint8_t* in, uint8_t* o, size_t, size_t n) { out.push_back({output ? o : in, n}); });
    return out;
  }

  // [off, off + len) of the output as a buffer of its own, read and written
  // in place (for a stage that works on results: the hierarchical
  // allreduce's cross-host stage).
  Parts output_range(size_t off, size_t len) const {
    Parts r;
    visit(off, len, [&](const uint8_t*, uint8_t* o, size_t, size_t n) { r.add(o, o, n); });
    return r;
  }

 private:
  struct Part {
    const uint8_t* in;
    uint8_t* out;
    size_t start, len;
  };

  // Index of the part holding byte `off` (off < bytes()).
  size_t first_at(size_t off) const {
    auto it = std::upper_bound(parts_.begin(), parts_.end(), off,
                               [](size_t o, const Part& p) { return o < p.start; });
    return static_cast<size_t>(it - parts_.begin()) - 1;
  }

  std::vector<Part> parts_;
  size_t bytes_ = 0;
};

}  // namespace ring
