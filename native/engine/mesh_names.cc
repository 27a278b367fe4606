#include "engine/mesh_names.h"

#include "common/error.h"
#include "transport/shm_channel.h"

namespace ring {
namespace {

const char* const kMeshSuffixes[kNumMeshRoles] = {"", "-c"};

}  // namespace

std::string mesh_job_id(const std::string& job_id, MeshRole role) {
  return job_id + kMeshSuffixes[static_cast<int>(role)];
}

std::vector<std::string> shm_segment_names(const std::string& job_id, int rank) {
  if (rank < 0) throw_error(ErrorKind::BadArgument, "rank should be >= 0. Got: " + std::to_string(rank));
  std::vector<std::string> names;
  for (int role = 0; role < kNumMeshRoles; ++role) {
    const std::string id = mesh_job_id(job_id, static_cast<MeshRole>(role));
    if (!valid_job_id(id))
      throw_error(ErrorKind::BadArgument, "job_id should match [A-Za-z0-9_-]{1,126}. Got: '" +
                                              job_id + "'");
    names.push_back(shm_segment_name(id, rank));
  }
  return names;
}

}  // namespace ring
