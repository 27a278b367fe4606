// MeshBuilder: endpoints, transport choice, connection set-up.
//
// Endpoint string (opaque to callers, versioned by its first field):
//   ring1;rank=<r>;host_id=<%>;hostname=<%>;pid=<n>;addr=<%>;port=<n>;shm=<%>
// <%> fields are percent-encoded (bytes outside [A-Za-z0-9._~-] become %XX);
// port is 0 and shm empty when this rank opened no listener / no segment.
//
// Transport choice, made identically on both sides of every pair because it
// depends only on the two endpoints: shared memory when both ranks created
// a segment (size > 1, not force_tcp) and their host_ids are equal; TCP
// otherwise. For TCP the higher rank dials the lower rank's listener, so
// every pair gets exactly one connection; both sides then authenticate with
// the handshake, which also tells the acceptor which rank dialed.
#include "transport/mesh_builder.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <optional>
#include <sstream>
#include <thread>
#include <utility>

#include "common/error.h"
#include "transport/aead_channel.h"
#include "transport/handshake.h"
#include "transport/shm_channel.h"
#include "transport/tcp_channel.h"

namespace ring {
namespace {

constexpr double kRedialSeconds = 0.05;
constexpr size_t kMaxPendingHandshakes = 64;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Closes the descriptor it owns.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    reset(o.release());
    return *this;
  }
  ~UniqueFd() { reset(); }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

struct Endpoint {
  int rank = -1;
  std::string host_id, hostname;
  int pid = 0;
  std::string addr;
  int port = 0;
  std::string shm;
};

std::string escape(const std::string& s) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '.' || c == '_' || c == '~' || c == '-') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

bool unescape(const std::string& s, std::string* out) {
  out->clear();
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      unsigned char c = static_cast<unsigned char>(s[i]);
      if (!(std::isalnum(c) || c == '.' || c == '_' || c == '~' || c == '-')) return false;
      *out += s[i];
      continue;
    }
    if (i + 2 >= s.size()) return false;
    int hi = hex_value(s[i + 1]), lo = hex_value(s[i + 2]);
    if (hi < 0 || lo < 0) return false;
    *out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return true;
}

bool parse_int(const std::string& s, long lo, long hi, int* out) {
  if (s.empty() || s.size() > 10 || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return false;
  long v = std::stol(s);
  if (v < lo || v > hi) return false;
  *out = static_cast<int>(v);
  return true;
}

std::string format_endpoint(const Endpoint& e) {
  std::ostringstream os;
  os << "ring1;rank=" << e.rank << ";host_id=" << escape(e.host_id) << ";hostname=" << escape(e.hostname)
     << ";pid=" << e.pid << ";addr=" << escape(e.addr) << ";port=" << e.port << ";shm=" << escape(e.shm);
  return os.str();
}

[[noreturn]] void bad_endpoint(int rank, const std::string& why, const std::string& s) {
  std::string shown = s.size() > 200 ? s.substr(0, 200) + "..." : s;
  throw_error(ErrorKind::BadArgument, "endpoint of rank " + std::to_string(rank) + " is malformed (" + why +
                                          "). Got: '" + shown + "'");
}

// Parses rank `rank`'s endpoint; throws BadArgument quoting it.
Endpoint parse_endpoint(const std::string& s, int rank) {
  static const char* kKeys[] = {"rank", "host_id", "hostname", "pid", "addr", "port", "shm"};
  std::vector<std::string> fields(1);
  for (char c : s) {  // by hand: getline would drop a trailing empty field
    if (c == ';')
      fields.emplace_back();
    else
      fields.back() += c;
  }
  if (fields.size() != 8 || fields[0] != "ring1") bad_endpoint(rank, "expected 'ring1;' and 7 fields", s);
  std::string v[7];
  for (int i = 0; i < 7; ++i) {
    std::string prefix = std::string(kKeys[i]) + "=";
    if (fields[i + 1].compare(0, prefix.size(), prefix) != 0) bad_endpoint(rank, "expected field " + prefix, s);
    if (!unescape(fields[i + 1].substr(prefix.size()), &v[i])) bad_endpoint(rank, "bad escape in " + prefix, s);
  }
  Endpoint e;
  e.host_id = v[1];
  e.hostname = v[2];
  e.addr = v[4];
  e.shm = v[6];
  if (!parse_int(v[0], 0, 1 << 30, &e.rank)) bad_endpoint(rank, "bad rank", s);
  if (e.rank != rank) bad_endpoint(rank, "it names rank " + std::to_string(e.rank), s);
  if (!parse_int(v[3], 1, 0x7fffffff, &e.pid)) bad_endpoint(rank, "bad pid", s);
  if (!parse_int(v[5], 0, 65535, &e.port)) bad_endpoint(rank, "bad port", s);
  if (e.port != 0 && e.addr.empty()) bad_endpoint(rank, "port without addr", s);
  return e;
}

std::string local_hostname() {
  char buf[256] = {0};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "unknown-host";
  return buf;
}

void validate(const MeshOptions& o) {
  auto bad = [](const std::string& what) { throw_error(ErrorKind::BadArgument, "MeshOptions: " + what); };
  if (o.size < 1) bad("size should be >= 1. Got: " + std::to_string(o.size));
  if (o.rank < 0 || o.rank >= o.size)
    bad("rank should be in [0, " + std::to_string(o.size) + "). Got: " + std::to_string(o.rank));
  if (o.size > 1 && o.secret.empty()) bad("a job secret is required when size > 1");
  if (o.size > 1 && !o.force_tcp && !valid_job_id(o.job_id))
    bad("job_id should match [A-Za-z0-9_-]{1,128}. Got: '" + o.job_id + "'");
  if (o.shm_ring_bytes < 64 || o.shm_ring_bytes > (size_t(1) << 40))
    bad("shm_ring_bytes should be in [64, 2^40]. Got: " + std::to_string(o.shm_ring_bytes));
  if (!(o.connect_timeout_s > 0)) bad("connect_timeout_s should be > 0");
}

struct TcpTarget {
  bool tcp = false;  // false: no TCP connection to this rank
  std::string addr;
  int port = 0;
};

// Dials every lower TCP peer and accepts every higher one from one poll()
// loop, so a slow, silent or hostile connection never holds up the others.
// Dials that fail (refused, handshake error) are retried until the deadline;
// accepted connections that fail the handshake, or do not finish it within
// kHandshakeTimeoutSeconds, are dropped.
// An authenticated connection and the keys its handshake gave it.
struct TcpLink {
  UniqueFd fd;
  Handshake::SessionKeys keys;
};

class TcpConnector {
 public:
  TcpConnector(int rank, std::string secret, int listener, std::vector<TcpTarget> targets)
      : rank_(rank), secret_(std::move(secret)), listener_(listener), targets_(std::move(targets)),
        result_(targets_.size()) {
    for (int r = 0; r < static_cast<int>(targets_.size()); ++r) {
      if (!targets_[r].tcp) continue;
      ++missing_;
      if (r < rank_) dials_.emplace_back(r);
    }
  }

  // One authenticated socket per TCP peer (index = rank). Throws Timeout at
  // `deadline`, naming `me` and every peer still missing.
  std::vector<TcpLink> run(double deadline, const std::string& me, double timeout_s) {
    while (missing_ > 0) {
      if (now_s() >= deadline) timeout(me, timeout_s);
      start_due_dials();
      poll_once();
    }
    return std::move(result_);
  }

 private:
  struct Dial {
    explicit Dial(int p) : peer(p) {}
    int peer;
    UniqueFd fd;
    bool connecting = false;
    std::optional<Handshake> hs;
    double retry_at = 0;
    std::string last_error = "no attempt finished yet";
  };
  struct Incoming {
    UniqueFd fd;
    Handshake hs;
    double deadline;
  };

  std::string at(int r) const { return targets_[r].addr + ":" + std::to_string(targets_[r].port); }

  void start_due_dials() {
    double now = now_s();
    for (auto& d : dials_) {
      if (result_[d.peer].fd.get() >= 0 || d.fd.get() >= 0 || now < d.retry_at) continue;
      std::string err;
      int fd = start_connect(targets_[d.peer].addr, targets_[d.peer].port, &err);
      if (fd < 0) {
        failed(d, err);
      } else {
        d.fd.reset(fd);
        d.connecting = true;
      }
    }
  }

  void failed(Dial& d, const std::string& why) {
    d.fd.reset();
    d.connecting = false;
    d.hs.reset();
    d.last_error = why;
    d.retry_at = now_s() + kRedialSeconds;
  }

  // One poll() over the listener, the dials in flight and the handshakes.
  void poll_once() {
    std::vector<pollfd> fds;
    fds.push_back({listener_, POLLIN, 0});
    for (auto& d : dials_)
      fds.push_back({d.fd.get(), static_cast<short>(d.connecting ? POLLOUT : d.hs ? d.hs->poll_events() : 0), 0});
    for (auto& in : incoming_) fds.push_back({in.fd.get(), in.hs.poll_events(), 0});
    ::poll(fds.data(), fds.size(), 20);  // short: also paces redials and the deadline
    for (size_t i = 0; i < dials_.size(); ++i)
      if (fds[1 + i].revents) advance(dials_[i]);
    std::vector<short> revents;
    for (size_t i = 1 + dials_.size(); i < fds.size(); ++i) revents.push_back(fds[i].revents);
    if (fds[0].revents & POLLIN) accept_all(&revents);
    advance_incoming(revents);
  }

  void advance(Dial& d) {
    try {
      if (d.connecting) {
        std::string err = finish_connect(d.fd.get());
        if (!err.empty()) throw HandshakeError(err);
        d.connecting = false;
        d.hs = Handshake::connector(secret_, rank_, d.peer);
      }
      if (d.hs->advance(d.fd.get())) {
        result_[d.peer] = TcpLink{std::move(d.fd), d.hs->session_keys()};
        d.hs.reset();
        --missing_;
      }
    } catch (const HandshakeError& e) {
      failed(d, e.what());
    }
  }

  // New connections get POLLIN in `revents`: their Hello may be there already.
  void accept_all(std::vector<short>* revents) {
    for (;;) {
      int fd = ::accept4(listener_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;
      if (incoming_.size() >= kMaxPendingHandshakes) {
        // A flood: evict the oldest. A genuine peer answers within a round
        // trip, so the oldest pending connection is the likeliest stranger.
        incoming_.erase(incoming_.begin());
        revents->erase(revents->begin());
      }
      incoming_.push_back(Incoming{UniqueFd(fd), Handshake::acceptor(secret_, rank_, static_cast<int>(targets_.size())),
                                   now_s() + kHandshakeTimeoutSeconds});
      revents->push_back(POLLIN);
    }
  }

  // Keeps the connections that authenticate; drops strangers (bad bytes,
  // wrong secret, replay, silence past the limit).
  void advance_incoming(const std::vector<short>& revents) {
    double now = now_s();
    std::vector<Incoming> still;
    for (size_t i = 0; i < incoming_.size(); ++i) {
      Incoming& in = incoming_[i];
      bool keep = now < in.deadline;
      try {
        if (keep && revents[i] && in.hs.advance(in.fd.get())) {
          int p = in.hs.peer_rank();
          if (targets_[p].tcp) {
            if (result_[p].fd.get() < 0) --missing_;
            // A redial after a lost Ack replaces the first.
            result_[p] = TcpLink{std::move(in.fd), in.hs.session_keys()};
          }
          keep = false;
        }
      } catch (const HandshakeError&) {
        keep = false;
      }
      if (keep) still.push_back(std::move(in));
    }
    incoming_.swap(still);
  }

  [[noreturn]] void timeout(const std::string& me, double timeout_s) const {
    std::ostringstream os;
    os << me << " timed out after " << timeout_s << " s connecting to its peers; still missing:";
    for (int r = 0; r < static_cast<int>(targets_.size()); ++r) {
      if (!targets_[r].tcp || result_[r].fd.get() >= 0) continue;
      os << " rank " << r;
      if (r > rank_) {
        os << " (it has not connected to this rank's listener);";
        continue;
      }
      for (auto& d : dials_) {
        if (d.peer != r) continue;
        os << " (could not connect to it at " << at(r) << ": ";
        if (d.hs)
          os << "connected, but it has not completed the handshake);";
        else
          os << (d.connecting ? "connect() still in progress; last error: " : "") << d.last_error << ");";
      }
    }
    throw_error(ErrorKind::Timeout, os.str());
  }

  const int rank_;
  const std::string secret_;
  const int listener_;
  const std::vector<TcpTarget> targets_;
  std::vector<TcpLink> result_;
  std::vector<Dial> dials_;
  std::vector<Incoming> incoming_;
  int missing_ = 0;
};

}  // namespace

struct MeshBuilder::Impl {
  MeshOptions opts;
  std::string hostname = local_hostname();
  UniqueFd listener;
  std::shared_ptr<ShmSegment> own_seg;
  std::string endpoint;  // ours, once local_endpoint() ran
  std::vector<Endpoint> peers;
  std::vector<std::unique_ptr<Channel>> channels;
  bool connected = false, finalized = false, built = false;

  ~Impl() {
    if (own_seg && !finalized) own_seg->unlink();
  }

  std::string me() const { return "rank " + std::to_string(opts.rank) + " (this process)"; }
  std::string at(int r) const { return peers[r].addr + ":" + std::to_string(peers[r].port); }
  // "rank 1 (host-a, pid 4242)"; a peer on another host also shows the
  // address it is reached at, which names the machine when host names
  // repeat and tells which link failed: "rank 1 (host-b, 10.0.0.2, pid 7)".
  std::string peer_name(int r) const {
    std::string where = peers[r].hostname;
    if (peers[r].host_id != opts.host_id && !peers[r].addr.empty() && peers[r].addr != peers[r].hostname)
      where += ", " + peers[r].addr;
    return "rank " + std::to_string(r) + " (" + where + ", pid " + std::to_string(peers[r].pid) + ")";
  }
  bool use_shm(int r) const {
    return own_seg != nullptr && !peers[r].shm.empty() && peers[r].host_id == opts.host_id;
  }

  std::string make_endpoint();
  void open_shm(int r);
  std::vector<TcpLink> connect_tcp(const std::vector<bool>& tcp_peer, double deadline);
  void wait_shm_attached(const std::vector<bool>& tcp_peer, double deadline);
};

std::string MeshBuilder::Impl::make_endpoint() {
  Endpoint e;
  e.rank = opts.rank;
  e.host_id = opts.host_id;
  e.hostname = hostname;
  e.pid = static_cast<int>(::getpid());
  if (opts.size > 1) {
    listener = UniqueFd(listen_tcp(opts.bind_host, &e.port));
    e.addr = opts.advertise_host;
    if (!opts.force_tcp) {
      e.shm = shm_segment_name(opts.job_id, opts.rank);
      own_seg = ShmSegment::create(e.shm, opts.rank, opts.size, opts.shm_ring_bytes);
    }
  }
  return format_endpoint(e);
}

void MeshBuilder::Impl::open_shm(int r) {
  std::shared_ptr<ShmSegment> seg;
  try {
    seg = ShmSegment::open(peers[r].shm, r, opts.size, peers[r].pid);
  } catch (const RingError& e) {
    throw_error(ErrorKind::PeerFailure, me() + " could not open the shared memory of " + peer_name(r) + ": " +
                                            e.what() + " (same host_id '" + opts.host_id +
                                            "' but no shared /dev/shm? set distinct host ids or force TCP)");
  }
  channels[r] = std::make_unique<ShmChannel>(own_seg, seg, opts.rank, r);
}

std::vector<TcpLink> MeshBuilder::Impl::connect_tcp(const std::vector<bool>& tcp_peer, double deadline) {
  std::vector<TcpTarget> targets(opts.size);
  for (int r = 0; r < opts.size; ++r)
    if (tcp_peer[r]) targets[r] = TcpTarget{true, peers[r].addr, peers[r].port};
  TcpConnector c(opts.rank, opts.secret, listener.get(), std::move(targets));
  return c.run(deadline, me(), opts.connect_timeout_s);
}

// Waits until every shared-memory peer has mapped our segment, so that when
// connect() returns the name is no longer needed (as with TCP, where
// connect() returns once every peer is connected).
void MeshBuilder::Impl::wait_shm_attached(const std::vector<bool>& tcp_peer, double deadline) {
  for (;;) {
    std::vector<int> missing;
    for (int r = 0; r < opts.size; ++r) {
      if (r == opts.rank || tcp_peer[r]) continue;
      auto* ch = static_cast<ShmChannel*>(channels[r].get());
      if (ch->peer_attached()) continue;
      try {
        ch->check_alive();  // a peer that died before attaching fails now, not at the deadline
      } catch (const RingError& e) {
        throw_error(ErrorKind::PeerFailure, me() + " lost " + peer_name(r) + " while connecting: " + e.what());
      }
      missing.push_back(r);
    }
    if (missing.empty()) return;
    if (now_s() >= deadline) {
      std::ostringstream os;
      os << me() << " timed out after " << opts.connect_timeout_s << " s connecting to its peers; still missing:";
      for (int r : missing) os << " " << peer_name(r) << " (has not opened this rank's shared memory);";
      throw_error(ErrorKind::Timeout, os.str());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

MeshBuilder::MeshBuilder(MeshOptions opts) : impl_(std::make_unique<Impl>()) {
  validate(opts);
  if (opts.host_id.empty()) opts.host_id = impl_->hostname;
  impl_->opts = std::move(opts);
}

MeshBuilder::~MeshBuilder() = default;

std::string MeshBuilder::local_endpoint() {
  if (impl_->endpoint.empty()) impl_->endpoint = impl_->make_endpoint();
  return impl_->endpoint;
}

void MeshBuilder::connect(const std::vector<std::string>& endpoints) {
  Impl& m = *impl_;
  const int rank = m.opts.rank, size = m.opts.size;
  if (m.endpoint.empty()) throw_error(ErrorKind::Internal, "MeshBuilder: call local_endpoint() before connect()");
  if (m.connected) throw_error(ErrorKind::Internal, "MeshBuilder: connect() called twice");
  if (static_cast<int>(endpoints.size()) != size)
    throw_error(ErrorKind::BadArgument, "expected " + std::to_string(size) + " endpoints, one per rank. Got: " +
                                            std::to_string(endpoints.size()));
  if (endpoints[rank] != m.endpoint)
    throw_error(ErrorKind::BadArgument, "endpoints[" + std::to_string(rank) + "] is not " + m.me() + "'s endpoint");
  m.peers.clear();
  for (int r = 0; r < size; ++r) m.peers.push_back(parse_endpoint(endpoints[r], r));
  std::vector<bool> tcp_peer(size, false);
  for (int r = 0; r < size; ++r) {
    if (r == rank) continue;
    if (m.use_shm(r)) {
      // Only ever map a segment of this job: the name is not taken on trust.
      if (m.peers[r].shm != shm_segment_name(m.opts.job_id, r))
        throw_error(ErrorKind::BadArgument, "endpoint of rank " + std::to_string(r) + " names shared memory '" +
                                                m.peers[r].shm + "', expected '" + shm_segment_name(m.opts.job_id, r) + "'");
      continue;
    }
    if (m.peers[r].port == 0)
      throw_error(ErrorKind::BadArgument, "endpoint of rank " + std::to_string(r) + " has no TCP listener, but " +
                                              m.me() + " must reach it over TCP");
    tcp_peer[r] = true;
  }
  m.channels.clear();
  m.channels.resize(size);
  for (int r = 0; r < size; ++r)
    if (r != rank && !tcp_peer[r]) m.open_shm(r);
  const double deadline = now_s() + m.opts.connect_timeout_s;
  std::vector<TcpLink> links = m.connect_tcp(tcp_peer, deadline);
  for (int r = 0; r < size; ++r) {
    if (!tcp_peer[r]) continue;
    std::unique_ptr<Channel> tcp = std::make_unique<TcpChannel>(links[r].fd.release());
    m.channels[r] = m.opts.encrypt ? std::make_unique<AeadChannel>(std::move(tcp), links[r].keys.send, links[r].keys.recv)
                                   : std::move(tcp);
  }
  m.listener.reset();  // every peer that dials us has done so
  m.wait_shm_attached(tcp_peer, deadline);
  m.connected = true;
}

void MeshBuilder::finalize() {
  if (impl_->own_seg) impl_->own_seg->unlink();
  impl_->finalized = true;
}

std::unique_ptr<Mesh> MeshBuilder::build() {
  Impl& m = *impl_;
  if (!m.connected || m.built) throw_error(ErrorKind::Internal, "MeshBuilder: build() needs one successful connect()");
  m.built = true;
  std::vector<std::string> names;
  for (int r = 0; r < m.opts.size; ++r) names.push_back(m.peer_name(r));
  return std::make_unique<Mesh>(m.opts.rank, m.opts.size, std::move(m.channels), std::move(names));
}

void validate_endpoint(const std::string& endpoint, int rank) { parse_endpoint(endpoint, rank); }

}  // namespace ring
