#include "engine/fast_round.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "common/error.h"

namespace ring {
namespace {

// Wire layout: tag u8, round u64, no_fast u8, count u32, then per item
// id u32, hit u8 and, for a hit, bytes u32 and the data. Little-endian
// like every control message (engine/wire.h).
constexpr size_t kHeaderBytes = 1 + 8 + 1 + 4;
constexpr size_t kCountAt = 1 + 8 + 1;

template <class T>
void put(std::vector<uint8_t>& buf, T v) {
  const size_t at = buf.size();
  buf.resize(at + sizeof(T));
  std::memcpy(buf.data() + at, &v, sizeof(T));
}

[[noreturn]] void malformed(const std::string& what) {
  throw_error(ErrorKind::Internal, "malformed fast-path control message: " + what);
}

class Reader {
 public:
  explicit Reader(const std::vector<uint8_t>& b) : p_(b.data()), end_(b.data() + b.size()) {}
  template <class T>
  T get() {
    T v;
    need(sizeof(T));
    std::memcpy(&v, p_, sizeof(T));
    p_ += sizeof(T);
    return v;
  }
  const uint8_t* skip(size_t n) {
    need(n);
    const uint8_t* at = p_;
    p_ += n;
    return at;
  }
  bool done() const { return p_ == end_; }

 private:
  void need(size_t n) const {
    if (static_cast<size_t>(end_ - p_) < n) malformed("truncated");
  }
  const uint8_t* p_;
  const uint8_t* end_;
};

}  // namespace

FastWriter::FastWriter(uint64_t round, bool no_fast) {
  buf_.reserve(64);
  put<uint8_t>(buf_, FastMessage::kTag);
  put<uint64_t>(buf_, round);
  put<uint8_t>(buf_, no_fast ? 1 : 0);
  put<uint32_t>(buf_, 0);  // the count, set by finish()
}

uint8_t* FastWriter::hit(uint32_t id, uint32_t bytes) {
  put<uint32_t>(buf_, id);
  put<uint8_t>(buf_, 1);
  put<uint32_t>(buf_, bytes);
  const size_t at = buf_.size();
  buf_.resize(at + bytes);
  ++count_;
  return buf_.data() + at;
}

void FastWriter::slow(uint32_t id) {
  put<uint32_t>(buf_, id);
  put<uint8_t>(buf_, 0);
  ++count_;
}

std::vector<uint8_t> FastWriter::finish() {
  std::memcpy(buf_.data() + kCountAt, &count_, 4);
  return std::move(buf_);
}

FastMessage FastMessage::decode(std::vector<uint8_t> msg) {
  FastMessage m;
  m.bytes = std::move(msg);
  if (m.bytes.size() < kHeaderBytes || m.bytes[0] != kTag) malformed("no header");
  Reader r(m.bytes);
  r.get<uint8_t>();
  m.round = r.get<uint64_t>();
  m.no_fast = r.get<uint8_t>() != 0;
  const uint32_t count = r.get<uint32_t>();
  // Every item takes at least 5 bytes: a count past that is corrupt.
  if (count > (m.bytes.size() - kHeaderBytes) / 5) malformed("item count " + std::to_string(count));
  m.items.resize(count);
  for (uint32_t i = 0; i < count; ++i) {
    FastItem& it = m.items[i];
    it.id = r.get<uint32_t>();
    if (i > 0 && it.id <= m.items[i - 1].id) malformed("ids out of order");
    it.hit = r.get<uint8_t>() != 0;
    if (!it.hit) continue;
    it.bytes = r.get<uint32_t>();
    it.data = r.skip(it.bytes);
  }
  if (!r.done()) malformed("trailing bytes");
  return m;
}

FastDecision decide(const std::vector<const FastMessage*>& msgs) {
  FastDecision d;
  const size_t n = msgs.size();
  for (const FastMessage* m : msgs) d.no_fast |= m->no_fast;
  // A merge of the n ascending item lists: at[r] is rank r's next item.
  std::vector<size_t> at(n, 0);
  while (true) {
    uint32_t id = UINT32_MAX;
    bool any = false;
    for (size_t r = 0; r < n; ++r)
      if (at[r] < msgs[r]->items.size()) {
        id = std::min(id, msgs[r]->items[at[r]].id);
        any = true;
      }
    if (!any) break;
    size_t hits = 0;
    bool slow = false;
    for (size_t r = 0; r < n; ++r) {
      if (at[r] >= msgs[r]->items.size() || msgs[r]->items[at[r]].id != id) continue;
      if (msgs[r]->items[at[r]].hit) ++hits;
      else slow = true;
      ++at[r];
    }
    FastVerdict v = FastVerdict::Wait;
    if (d.no_fast || slow) v = FastVerdict::Back;
    else if (hits == n) v = FastVerdict::Run;
    d.verdicts.emplace_back(id, v);
  }
  return d;
}

}  // namespace ring
