// MeshBuilder: creates this rank's endpoints, connects to every peer and
// returns the Mesh. Rendezvous (exchanging endpoint strings) is the caller's
// job, done in Python through the job's key-value store:
//
//   MeshBuilder b(opts);
//   std::string mine = b.local_endpoint();   // publish under this rank
//   b.connect(all_endpoints);                // all ranks' strings, by rank;
//                                            // returns once every peer is
//                                            // connected (shm: has attached)
//   (barrier: recommended, no longer needed for safety)
//   b.finalize();                            // unlink shared-memory names
//   std::unique_ptr<Mesh> mesh = b.build();
//
// Peers whose host_id equals ours use shared memory unless force_tcp; the
// rest use TCP. Every TCP connection starts with a mutual HMAC-SHA256
// handshake over fresh nonces keyed by the job secret; a connection that
// fails it is closed and the listener keeps waiting for the real peer.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "transport/mesh.h"

namespace ring {

struct MeshOptions {
  int rank = 0;
  int size = 1;
  std::string secret;       // job secret (raw bytes); required when size > 1
  std::string job_id;       // [A-Za-z0-9_-]+, names shared-memory segments
  std::string host_id;      // peers with equal host_id are on this host
  std::string bind_host = "127.0.0.1";  // address the TCP listener binds
  std::string advertise_host = "127.0.0.1";  // address peers connect to
  bool force_tcp = false;   // RING_TRANSPORT=tcp
  bool encrypt = false;     // RING_ENCRYPT=1: TCP links are AeadChannels
  size_t shm_ring_bytes = 1u << 20;  // capacity of each directed shm ring
  double connect_timeout_s = 60.0;
};

class MeshBuilder {
 public:
  explicit MeshBuilder(MeshOptions opts);
  ~MeshBuilder();  // cleans up anything not handed to a Mesh

  // Opens the TCP listener and this rank's shared-memory segment; returns an
  // opaque string to publish for the peers.
  std::string local_endpoint();

  // Connects to every peer. endpoints[r] is rank r's local_endpoint().
  // Throws RingError(Timeout) naming the missing peers after
  // connect_timeout_s, RingError(BadArgument) on malformed endpoints.
  void connect(const std::vector<std::string>& endpoints);

  // Call once every rank has connected: removes shared-memory names so that
  // nothing is left behind however the job ends.
  void finalize();

  std::unique_ptr<Mesh> build();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Parses rank `rank`'s endpoint string as connect() does; throws
// RingError(BadArgument) quoting it when it is malformed.
void validate_endpoint(const std::string& endpoint, int rank);

}  // namespace ring
