// The meshes the engine opens for a job, and the shared-memory names they
// create. Every rank has a data mesh (collectives) and a control mesh
// (negotiation), each with its own MeshBuilder; a mesh's MeshOptions::job_id
// is the job's id plus the mesh's suffix.
#pragma once

#include <string>
#include <vector>

namespace ring {

enum class MeshRole { Data = 0, Control = 1 };
constexpr int kNumMeshRoles = 2;

// MeshOptions::job_id of mesh `role` of job `job_id`: "<job_id>" for data,
// "<job_id>-c" for control.
std::string mesh_job_id(const std::string& job_id, MeshRole role);

// Every POSIX shared-memory name (as given to shm_open, leading '/') that
// rank `rank` of job `job_id` may create: one per mesh, data mesh first.
// Throws RingError(BadArgument) for a job id that cannot name shared
// memory (valid_job_id) or a negative rank.
std::vector<std::string> shm_segment_names(const std::string& job_id, int rank);

}  // namespace ring
