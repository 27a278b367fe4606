#include "engine/timeline_format.h"

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

// A bounded writer into a stack buffer: most events are one append.
class Line {
 public:
  void text(const char* s) { text(s, std::strlen(s)); }
  void text(const char* s, size_t n) {
    std::memcpy(p_, s, n);
    p_ += n;
  }
  void number(long long v) { p_ = std::to_chars(p_, end_, v).ptr; }
  void to(std::string& out) const { out.append(buf_, static_cast<size_t>(p_ - buf_)); }

 private:
  static constexpr size_t kSize = 192;  // static names are short; numbers at most 20 characters
  char buf_[kSize];
  char* p_ = buf_;
  char* const end_ = buf_ + kSize;
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
// This writes all but the closing brace.
void open_event(Line& l, Stamp& stamp, const TimelineEvent& e) {
  static const char kPh[] = R"({"ph":")";
  l.text(kPh, sizeof(kPh) - 1);
  const char ph = e.kind == 'S' ? 'X' : e.kind == 'I' || e.kind == 'C' ? 'i' : e.kind == 'e' ? 'E' : e.kind;
  l.text(&ph, 1);
  if (e.kind == 'I') {
    l.text(R"(","name":")");
    l.number(e.arg);
  } else if (e.name && *e.name) {
    l.text(R"(","name":")");
    l.text(e.name);
  }
  l.text(R"(","ts":)");
  stamp.put(l, e.ts);
  if (e.kind == 'S') {
    l.text(R"(,"dur":)");
    l.number(e.arg);
  }
  l.text(R"(,"pid":)");
  l.number(e.row);
}

void format_row(const TimelineEvent& e, const TimelineBatch& batch, std::string& out) {
  out += R"({"name":"process_name","ph":"M","pid":)";
  append_int(out, e.row);
  out += R"(,"args":{"name":")";
  append_escaped(out, batch.names[static_cast<size_t>(e.arg)]);
  out += "\"}},\n";
  out += R"({"name":"process_sort_index","ph":"M","pid":)";
  append_int(out, e.row);
  out += R"(,"args":{"sort_index":)";
  append_int(out, e.row);
  out += "}},\n";
}

void format_end_op(const TimelineEvent& e, Stamp& stamp, const TimelineBatch& batch, std::string& out) {
  Line l;
  open_event(l, stamp, e);
  l.to(out);
  const int64_t* d = batch.dims.data() + e.arg;
  out += R"(,"args":{"dtype":")";
  out += dtype_name(static_cast<DataType>(d[0]));
  out += R"(","shape":"[)";
  for (int64_t i = 0; i < d[1]; ++i) {
    if (i) out += ", ";
    append_int(out, d[2 + i]);
  }
  out += "]\"}},\n";
}

}  // namespace

void format_timeline_header(long long start_since_epoch_us, std::string* out) {
  *out += "[\n";
  *out += R"({"name":"process_name","ph":"M","pid":0,"args":{"name":"ring","start_time_since_epoch_in_micros":)";
  append_int(*out, start_since_epoch_us);
  *out += "}},\n";
  *out += R"({"name":"process_sort_index","ph":"M","pid":0,"args":{"sort_index":0}},)";
  *out += "\n";
}

void format_timeline_batch(const TimelineBatch& batch, std::string* out) {
  out->reserve(out->size() + batch.events.size() * 56);
  Stamp stamp;
  for (const TimelineEvent& e : batch.events) {
    if (e.kind == 'M') {
      format_row(e, batch, *out);
      continue;
    }
    if (e.kind == 'e') {
      format_end_op(e, stamp, batch, *out);
      continue;
    }
    Line l;
    open_event(l, stamp, e);
    if (e.kind == 'C') l.text(R"(,"s":"g")");
    l.text("},\n");
    l.to(*out);
  }
}

}  // namespace ring
