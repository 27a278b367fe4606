#include "engine/process_sets.h"

#include <algorithm>

#include "common/error.h"

namespace ring {

int ProcessSet::index_of(int r) const {
  auto it = std::lower_bound(ranks.begin(), ranks.end(), r);
  return it != ranks.end() && *it == r ? static_cast<int>(it - ranks.begin()) : -1;
}

std::string qualified_name(const std::string& name, int32_t id) {
  return id == 0 ? name : "process_set" + std::to_string(id) + "/" + name;
}

ProcessSetTable::ProcessSetTable(int world_size) : world_size_(world_size) {
  auto global = std::make_shared<ProcessSet>();
  for (int r = 0; r < world_size; ++r) global->ranks.push_back(r);
  sets_.emplace(0, std::move(global));
}

std::vector<int> ProcessSetTable::checked_ranks(std::vector<int> ranks) const {
  if (ranks.empty()) throw_error(ErrorKind::BadArgument, "a process set needs at least one rank");
  std::sort(ranks.begin(), ranks.end());
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] < 0 || ranks[i] >= world_size_)
      throw_error(ErrorKind::BadArgument, "process set rank " + std::to_string(ranks[i]) + " is outside [0, " +
                                              std::to_string(world_size_) + ")");
    if (i && ranks[i] == ranks[i - 1])
      throw_error(ErrorKind::BadArgument, "process set lists rank " + std::to_string(ranks[i]) + " twice");
  }
  return ranks;
}

void ProcessSetTable::add(int32_t id, std::vector<int> ranks, std::unique_ptr<Mesh> mesh) {
  if (id <= 0) throw_error(ErrorKind::BadArgument, "process set id " + std::to_string(id) + " is reserved or invalid");
  auto set = std::make_shared<ProcessSet>();
  set->id = id;
  set->ranks = checked_ranks(std::move(ranks));
  set->mesh = std::move(mesh);
  std::lock_guard<std::mutex> lock(mu_);
  set->serial = last_serial_ + 1;
  if (!sets_.emplace(id, std::move(set)).second)
    throw_error(ErrorKind::BadArgument, "process set id " + std::to_string(id) + " is already in use");
  ++last_serial_;
}

bool ProcessSetTable::remove(int32_t id) {
  if (id == 0) throw_error(ErrorKind::BadArgument, "the global process set (id 0) cannot be removed");
  std::lock_guard<std::mutex> lock(mu_);
  return sets_.erase(id) > 0;
}

std::shared_ptr<const ProcessSet> ProcessSetTable::find(int32_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sets_.find(id);
  return it == sets_.end() ? nullptr : it->second;
}

}  // namespace ring
