#include "engine/timeline_format.h"

#include <algorithm>
#include <charconv>
#include <cstring>

#include "common/types.h"

namespace ring {
namespace {

void append_int(std::string& s, long long v) {
  char buf[24];
  auto res = std::to_chars(buf, buf + sizeof(buf), v);
  s.append(buf, res.ptr);
}

// JSON string contents: quotes, backslashes and control characters escaped.
void append_escaped(std::string& s, const std::string& text) {
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') {
      s += '\\';
      s += static_cast<char>(c);
    } else if (c < 0x20) {
      static const char* hex = "0123456789abcdef";
      s += "\\u00";
      s += hex[c >> 4];
      s += hex[c & 15];
    } else {
      s += static_cast<char>(c);
    }
  }
}

// One line written straight into the text's buffer (or into a small local
// one): most events are one room() and a few copies.
class Line {
 public:
  static constexpr size_t kMax = 192;  // static names are short; numbers at most 20 characters

  explicit Line(TimelineText& out) : out_(&out), p_(out.room(kMax)), end_(p_ + kMax) {}
  Line(char* buf, size_t size) : p_(buf), end_(buf + size) {}
  ~Line() {
    if (out_) out_->commit(p_);
  }
  template <size_t N>
  void text(const char (&literal)[N]) {
    text(literal, N - 1);
  }
  void cstr(const char* s) { text(s, std::strlen(s)); }
  void text(const char* s, size_t n) {
    std::memcpy(p_, s, n);
    p_ += n;
  }
  // The first n bytes of `block`, copied as the whole block (N bytes, known
  // when compiling: a few moves instead of a call). The line must have room
  // for N bytes at this point.
  template <size_t N>
  void prefix_of(const char (&block)[N], size_t n) {
    std::memcpy(p_, block, N);
    p_ += n;
  }
  void number(long long v) { p_ = std::to_chars(p_, end_, v).ptr; }
  char* end() const { return p_; }

 private:
  TimelineText* out_ = nullptr;
  char* p_;
  char* const end_;
};

// Events come in runs that share a time stamp (a phase on every tensor of a
// fused batch): its text is made once per run.
class Stamp {
 public:
  void put(Line& l, long long ts) {
    if (ts != ts_) {
      ts_ = ts;
      n_ = static_cast<size_t>(std::to_chars(text_, text_ + sizeof(text_), ts).ptr - text_);
    }
    l.text(text_, n_);
  }

 private:
  long long ts_ = -1;
  char text_[24];
  size_t n_ = 0;
};

// Compact JSON: the file's size is most of its cost.
//   'B' {"ph":"B","name":PHASE,"ts":T,"pid":P}   'E' {"ph":"E","ts":T,"pid":P}
//   'S' {"ph":"X","name":PHASE,"ts":T,"dur":D,"pid":P}
//   'I' {"ph":"i","name":RANK,"ts":T,"pid":P}    'C' {"ph":"i","name":"CYCLE_START","ts":T,"pid":0,"s":"g"}
//   'e' {"ph":"E","name":OP,"ts":T,"pid":P,"args":{"dtype":...,"shape":...}}
// A line's start, up to "ts":, depends on the kind, the phase and (for 'I')
// the rank only; events come in runs of one kind and phase, so each kind
// keeps the text of its last start and makes it again only when that
// changes.
class Prefixes {
 public:
  void put(Line& l, const TimelineEvent& e) {
    Slot& s = slots_[slot(e.kind)];
    const int32_t arg = e.kind == 'I' ? e.arg : 0;
    if (s.n == 0 || s.name != e.name || s.arg != arg) make(s, e, arg);
    l.text(s.text, s.n);
  }

 private:
  struct Slot {
    const char* name = nullptr;
    int32_t arg = 0;
    size_t n = 0;  // 0: not made yet
    char text[64];
  };
  static int slot(char kind) {
    switch (kind) {
      case 'B': return 0;
      case 'E': return 1;
      case 'S': return 2;
      case 'I': return 3;
      case 'C': return 4;
      default: return 5;  // 'e'
    }
  }
  static void make(Slot& s, const TimelineEvent& e, int32_t arg) {
    std::string t = R"({"ph":")";
    t += e.kind == 'S' ? 'X' : e.kind == 'I' || e.kind == 'C' ? 'i' : e.kind == 'e' ? 'E' : e.kind;
    if (e.kind == 'I') {
      t += R"(","name":")";
      append_int(t, arg);
    } else if (e.name && *e.name) {
      t += R"(","name":")";
      t += e.name;
    }
    t += R"(","ts":)";
    s.n = std::min(t.size(), sizeof(s.text));  // phase names are short static strings
    std::memcpy(s.text, t.data(), s.n);
    s.name = e.name;
    s.arg = arg;
  }

  Slot slots_[6];
};

// ,"pid":P for each row, made the first time the row is written.
class Pids {
 public:
  void put(Line& l, int32_t row) {
    const size_t i = static_cast<size_t>(row);
    if (i >= pids_.size()) pids_.resize(i + 1);
    Pid& p = pids_[i];
    if (p.n == 0) {
      std::memcpy(p.text, R"(,"pid":)", 7);
      p.n = static_cast<uint8_t>(std::to_chars(p.text + 7, p.text + sizeof(p.text), row).ptr - p.text);
    }
    l.prefix_of(p.text, p.n);
  }

 private:
  struct Pid {
    char text[20] = {};
    uint8_t n = 0;
  };
  std::vector<Pid> pids_;
};

class Formatter {
 public:
  Formatter(const TimelineBatch& batch, TimelineText& out) : batch_(batch), out_(out) {}

  void event(const TimelineEvent& e) {
    if (e.kind == 'M') return row_name(e);
    if (e.row >= 0) return lines(e, &e.row, 1);
    const int32_t* g = batch_.groups.data() + (-1 - e.row);  // a group: its size, then its rows
    lines(e, g + 1, g[0]);
  }

 private:
  // The line up to its "pid": the same for every row of a group.
  void head(Line& l, const TimelineEvent& e) {
    prefixes_.put(l, e);
    stamp_.put(l, e.ts);
    if (e.kind == 'S') {
      l.text(R"(,"dur":)");
      l.number(e.arg);
    }
  }

  // The lines of an event on `count` rows: one per row, two for 'R' (a
  // negotiation opening with the first rank's tick); an 'e' event's dtypes
  // and shapes follow each other in dims.
  void lines(const TimelineEvent& e, const int32_t* rows, int32_t count) {
    if (e.kind == 'R') {
      Head open(*this, TimelineEvent{e.ts, e.name, 0, 0, 'B'});
      Head tick(*this, TimelineEvent{e.ts, nullptr, 0, e.arg, 'I'});
      for (int32_t i = 0; i < count; ++i) {
        plain_line(open, rows[i], false);
        plain_line(tick, rows[i], false);
      }
      return;
    }
    Head h(*this, e);
    if (e.kind != 'e') {
      for (int32_t i = 0; i < count; ++i) plain_line(h, rows[i], e.kind == 'C');
      return;
    }
    const int64_t* dims = batch_.dims.data() + e.arg;
    for (int32_t i = 0; i < count; ++i) {
      {
        Line l(out_);
        l.prefix_of(h.text, h.n);
        pids_.put(l, rows[i]);
      }
      dims = end_args(dims);
    }
  }

  // An event's line up to its "pid", made once for every row of a group.
  // A line begins with a head (at most 104 bytes: a 64-byte prefix, a time
  // stamp and a duration) and a pid (at most 18): copied as whole blocks,
  // they stay within the room of a line.
  struct Head {
    Head(Formatter& f, const TimelineEvent& e) {
      Line l(text, sizeof(text));
      f.head(l, e);
      n = static_cast<size_t>(l.end() - text);
    }
    char text[128] = {};
    size_t n;
  };
  static_assert(sizeof(Head::text) + 20 + 4 <= Line::kMax, "a head, a pid and the end fit in a line");

  // global: a cycle mark, an instant over the whole trace.
  void plain_line(const Head& h, int32_t row, bool global) {
    Line l(out_);
    l.prefix_of(h.text, h.n);
    pids_.put(l, row);
    if (global) l.text(R"(,"s":"g")");
    l.text("},\n");
  }

  // The rest of an 'e' line: its dtype and shape (d: dtype, rank, the
  // dims). Returns where the next row's dims begin.
  const int64_t* end_args(const int64_t* d) {
    {
      Line l(out_);
      l.text(R"(,"args":{"dtype":")");
      l.cstr(dtype_name(static_cast<DataType>(d[0])));
      l.text(R"(","shape":"[)");
    }
    for (int64_t i = 0; i < d[1]; ++i) {  // a shape of any length, piece by piece
      Line l(out_);
      if (i) l.text(", ", 2);
      l.number(d[2 + i]);
    }
    Line(out_).text("]\"}},\n");
    return d + 2 + d[1];
  }

  void row_name(const TimelineEvent& e) {
    std::string s = R"({"name":"process_name","ph":"M","pid":)";
    append_int(s, e.row);
    s += R"(,"args":{"name":")";
    append_escaped(s, batch_.names[static_cast<size_t>(e.arg)]);
    s += "\"}},\n";
    s += R"({"name":"process_sort_index","ph":"M","pid":)";
    append_int(s, e.row);
    s += R"(,"args":{"sort_index":)";
    append_int(s, e.row);
    s += "}},\n";
    out_.append(s);
  }

  const TimelineBatch& batch_;
  TimelineText& out_;
  Prefixes prefixes_;
  Stamp stamp_;
  Pids pids_;
};

}  // namespace

void TimelineText::append(const char* s, size_t n) {
  while (n > 0) {
    const size_t part = std::min(n, kCapacity);
    char* p = room(part);
    std::memcpy(p, s, part);
    commit(p + part);
    s += part;
    n -= part;
  }
}

void TimelineText::flush() {
  if (used_ > 0) sink_(buf_.data(), used_);
  used_ = 0;
}

void format_timeline_header(long long start_since_epoch_us, TimelineText* out) {
  std::string s = "[\n";
  s += R"({"name":"process_name","ph":"M","pid":0,"args":{"name":"ring","start_time_since_epoch_in_micros":)";
  append_int(s, start_since_epoch_us);
  s += "}},\n";
  s += R"({"name":"process_sort_index","ph":"M","pid":0,"args":{"sort_index":0}},)";
  s += "\n";
  out->append(s);
}

void format_timeline_batch(const TimelineBatch& batch, TimelineText* out) {
  Formatter f(batch, *out);
  for (const TimelineEvent& e : batch.events) f.event(e);
}

}  // namespace ring
