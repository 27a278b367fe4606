// ResponseCache: names the coordinator has seen complete, numbered so that a
// repeated training step can say "ready" with one bit per tensor.
//
// Every rank holds the same name <-> id table because ids are assigned only
// by the coordinator, in ResponseList::cache_puts, which every rank applies
// in the same order. Next to each id the cache keeps the Request a rank last
// sent under that name (a worker its own, the coordinator every rank's): a
// bit means "the same request as last time". When capacity is reached no new
// names are added; they keep travelling as full requests.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/message.h"

namespace ring {

class ResponseCache {
 public:
  ResponseCache(size_t capacity, int world_size) : capacity_(capacity), world_size_(world_size) {}

  int64_t id_of(const std::string& name) const;
  // Throws RingError(Internal) for an unknown id.
  const std::string& name_of(uint32_t id) const;
  size_t size() const { return names_.size(); }
  bool full() const { return names_.size() >= capacity_; }

  // Adds name under id; ids must arrive densely in order (id == size()).
  void put(const std::string& name, uint32_t id);

  // The request `rank` last sent under cached `id`, or null.
  const Request* signature(uint32_t id, int rank) const;
  void set_signature(uint32_t id, int rank, const Request& req);

 private:
  size_t capacity_;
  int world_size_;
  std::vector<std::string> names_;
  std::unordered_map<std::string, uint32_t> ids_;
  std::vector<std::vector<std::unique_ptr<Request>>> signatures_;  // [id][rank]
};

}  // namespace ring
