// NodePool: nodes of a std::unordered_map (or map) kept after their entries
// left it, for the next entries to reuse, so that a map whose entries come
// and go with every operation allocates nothing per entry. At most kMax
// nodes are kept; the caller sets a reused node's key and value.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

namespace ring {

template <class Map>
class NodePool {
 public:
  using Node = typename Map::node_type;
  static constexpr size_t kMax = 4096;

  // A kept node (its old key and value still in it), or an empty one.
  Node take() {
    if (nodes_.empty()) return {};
    Node node = std::move(nodes_.back());
    nodes_.pop_back();
    return node;
  }
  // Whether keep() would keep a node rather than free it.
  bool has_room() const { return nodes_.size() < kMax; }
  // Keeps `node` (extracted from its map) when there is room; else frees it.
  void keep(Node node) {
    if (!node.empty() && has_room()) nodes_.push_back(std::move(node));
  }

 private:
  std::vector<Node> nodes_;
};

}  // namespace ring
