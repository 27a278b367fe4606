#include "engine/response_cache.h"

#include "common/error.h"

namespace ring {

int64_t ResponseCache::id_of(const std::string& name) const {
  auto it = ids_.find(name);
  return it == ids_.end() ? -1 : static_cast<int64_t>(it->second);
}

const std::string& ResponseCache::name_of(uint32_t id) const {
  if (id >= names_.size())
    throw_error(ErrorKind::Internal, "control message names unknown response-cache id " + std::to_string(id));
  return names_[id];
}

void ResponseCache::put(const std::string& name, uint32_t id) {
  if (id != names_.size() || ids_.count(name))
    throw_error(ErrorKind::Internal, "response cache out of step: put of '" + name + "' as id " +
                                         std::to_string(id) + " with " + std::to_string(names_.size()) + " entries");
  names_.push_back(name);
  ids_[name] = id;
  signatures_.emplace_back(world_size_);
}

const Request* ResponseCache::signature(uint32_t id, int rank) const {
  if (id >= signatures_.size() || rank < 0 || rank >= world_size_) return nullptr;
  return signatures_[id][rank].get();
}

void ResponseCache::set_signature(uint32_t id, int rank, const Request& req) {
  if (id >= signatures_.size() || rank < 0 || rank >= world_size_) return;
  signatures_[id][rank] = std::make_unique<Request>(req);
}

}  // namespace ring
