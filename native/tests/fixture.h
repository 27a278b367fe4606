// Runs N ranks as threads, each with its own Mesh, gloo-style.
//
// run_ranks(n, fn) connects the threads with in-process channels (a small,
// odd-sized byte ring per direction, so wrap-around and element carry paths
// are exercised). Each rank calls fn(mesh); exceptions are recorded as test
// failures naming the rank.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "transport/mesh.h"

namespace ring_test {

enum class Wire { Inproc, Shm, Tcp };
const char* wire_name(Wire w);

// Builds n meshes joined by in-process channels of `ring_bytes` per direction.
std::vector<std::unique_ptr<ring::Mesh>> make_inproc_meshes(int n, size_t ring_bytes = 1021);

// Builds n meshes over real shared memory or TCP on loopback (MeshBuilder),
// connecting the ranks from threads. Defined with the transports.
std::vector<std::unique_ptr<ring::Mesh>> make_meshes(Wire wire, int n);

// The hierarchical allreduce's two subgroups of `m` for `hosts` hosts of
// `per_host` consecutive ranks: this rank's host, and the ranks with its
// local rank on every host.
struct HostMeshes {
  std::unique_ptr<ring::Mesh> local, cross;
};
HostMeshes host_meshes(ring::Mesh& m, int hosts, int per_host);

// Runs fn on n threads, one mesh each; returns when all have finished.
void run_ranks(std::vector<std::unique_ptr<ring::Mesh>>& meshes, const std::function<void(ring::Mesh&)>& fn);

// Shortcut: in-process meshes.
void run_ranks(int n, const std::function<void(ring::Mesh&)>& fn);

}  // namespace ring_test
