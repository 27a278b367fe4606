#include "engine/agreement.h"

#include <algorithm>
#include <type_traits>

#include "engine/field_value.h"
#include "engine/request_fields.h"

namespace ring {
namespace {

using Requests = std::vector<std::optional<Request>>;

// Compares one view of a field across the submitted requests; builds the
// error text only when some rank differs from the first.
template <class Same, class Describe>
std::string compare(const std::string& name, const char* label, const Requests& reqs, Same same, Describe describe) {
  const Request* first = nullptr;
  bool differ = false;
  for (const auto& q : reqs) {
    if (!q) continue;
    if (!first) first = &*q;
    else if (!same(*first, *q)) differ = true;
  }
  if (!differ) return "";
  std::vector<std::string> values(reqs.size());
  for (size_t r = 0; r < reqs.size(); ++r)
    if (reqs[r]) values[r] = describe(*reqs[r]);
  return std::string("Mismatched ") + label + " for tensor '" + name + "': " + describe_disagreement(values);
}

// Lists of dimensions concatenated along the first: the element count, then
// every element but the first.
template <class Field>
std::string compare_rows(const std::string& name, const Field& f, const Requests& reqs) {
  using List = typename Field::Type;
  auto same_count = [&](const Request& a, const Request& b) { return (a.*f.member).size() == (b.*f.member).size(); };
  auto count = [&](const Request& q) { return std::to_string((q.*f.member).size()); };
  std::string err = compare(name, f.count_label, reqs, same_count, count);
  if (!err.empty()) return err;
  auto same_rest = [&](const Request& a, const Request& b) {
    const List &x = a.*f.member, &y = b.*f.member;  // of equal sizes, checked above
    return x.empty() || std::equal(x.begin() + 1, x.end(), y.begin() + 1);
  };
  auto rest = [&](const Request& q) {
    const List& v = q.*f.member;
    return describe_value(v.empty() ? v : List(v.begin() + 1, v.end()));
  };
  return compare(name, f.rest_label, reqs, same_rest, rest);
}

}  // namespace

std::string disagreement(const std::string& name, const Requests& by_rank) {
  auto submitted = std::find_if(by_rank.begin(), by_rank.end(), [](const auto& q) { return q.has_value(); });
  if (submitted == by_rank.end()) return "";
  // "operation" is checked before the fields that depend on it, so those
  // are only compared once every rank asked for the same operation.
  const OpMask op = op_bit((*submitted)->op);
  std::string err;
  for_each_request_field([&](const auto& f) {
    auto same = [&](const Request& a, const Request& b) { return same_value(a.*f.member, b.*f.member); };
    auto value = [&](const Request& q) { return describe_value(q.*f.member); };
    if (err.empty() && (f.agree_ops & op)) err = compare(name, f.label, by_rank, same, value);
    using T = typename std::decay_t<decltype(f)>::Type;
    if constexpr (std::is_same_v<T, std::vector<int64_t>>)
      if (err.empty() && (f.rows_ops & op)) err = compare_rows(name, f, by_rank);
  });
  return err;
}

std::string describe_disagreement(const std::vector<std::string>& values_by_rank) {
  std::vector<std::pair<std::string, std::vector<int>>> groups;
  for (int r = 0; r < static_cast<int>(values_by_rank.size()); ++r) {
    if (values_by_rank[r].empty()) continue;  // a joined rank
    auto it = std::find_if(groups.begin(), groups.end(), [&](auto& g) { return g.first == values_by_rank[r]; });
    if (it == groups.end()) groups.push_back({values_by_rank[r], {r}});
    else it->second.push_back(r);
  }
  std::string text;
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto& ranks = groups[g].second;
    text += (g ? "; " : "") + std::string(ranks.size() > 1 ? "ranks " : "rank ");
    for (size_t i = 0; i < ranks.size(); ++i) text += (i ? ", " : "") + std::to_string(ranks[i]);
    text += ": " + groups[g].first;
  }
  return text;
}

}  // namespace ring
