#include "transport/shm_channel.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <new>

#include "common/error.h"

namespace ring {

std::string shm_segment_name(const std::string& job_id, int rank) {
  return "/ring." + job_id + "." + std::to_string(rank);
}

bool valid_job_id(const std::string& job_id) {
  return !job_id.empty() && job_id.size() <= 128 && std::all_of(job_id.begin(), job_id.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
  });
}

namespace {

constexpr uint64_t kSegmentMagic = 0x31474e49522d6d73ull;  // "sm-RING1"
constexpr uint32_t kSegmentVersion = 2;
constexpr size_t kPage = 4096;

struct SegmentHeader {
  uint64_t magic;
  uint32_t version;
  int32_t rank;
  int32_t size;
  int32_t pid;  // the creator: peers watch it to notice a dead rank
  uint64_t ring_bytes;
  uint64_t stride;
  uint64_t data_offset;
};

size_t align_up(size_t v, size_t a) { return (v + a - 1) / a * a; }
size_t data_offset(int size) { return align_up(kPage + size * sizeof(ShmRingHeader), kPage); }
size_t stride(size_t ring_bytes) { return align_up(ring_bytes, kPage); }

std::string errno_text(const std::string& what, const std::string& name) {
  return what + " shared memory " + name + ": " + std::strerror(errno);
}

SegmentHeader* header(void* base) { return static_cast<SegmentHeader*>(base); }

// Maps a ring's pages into this process now, without touching their
// contents (the peer may already be writing). Otherwise the first pass
// around each ring takes a page fault per 4 KiB on both sides, which made
// a job's first few megabytes of traffic several times slower than the
// rest. Best effort: kernels before 5.14 fault the pages in on first use.
void prefault(const uint8_t* data, size_t len) {
#ifdef MADV_POPULATE_WRITE
  ::madvise(const_cast<uint8_t*>(data), len, MADV_POPULATE_WRITE);
#else
  (void)data;
  (void)len;
#endif
}

// The state letter of `pid` in /proc ('R', 'S', 'T', 'Z', ...): 'X' when it
// is gone, 0 when there is no /proc to read.
char process_state(int pid) {
  if (::kill(pid, 0) != 0 && errno == ESRCH) return 'X';
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  FILE* f = std::fopen(path, "r");
  if (!f) return false;  // no /proc: rely on kill() alone
  char buf[512];
  size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  buf[n] = 0;
  // "pid (comm) S ...": comm may contain spaces and parentheses, so the
  // state is after the last ')'.
  const char* paren = std::strrchr(buf, ')');
  return paren && paren[1] == ' ' ? paren[2] : 0;
}

}  // namespace

size_t shm_segment_bytes(int size, size_t ring_bytes) { return data_offset(size) + size * stride(ring_bytes); }

std::shared_ptr<ShmSegment> ShmSegment::create(const std::string& name, int rank, int size, size_t ring_bytes) {
  size_t len = shm_segment_bytes(size, ring_bytes);
  int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) throw_error(ErrorKind::Internal, errno_text("cannot create", name));
  // ftruncate makes a sparse, zero-filled object: untouched ring pages
  // (e.g. rings for peers on other hosts) cost no memory.
  void* base = MAP_FAILED;
  if (::ftruncate(fd, static_cast<off_t>(len)) == 0)
    base = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    std::string msg = errno_text("cannot size or map", name) + " (" + std::to_string(len) + " bytes; is /dev/shm full?)";
    ::close(fd);
    ::shm_unlink(name.c_str());
    throw_error(ErrorKind::Internal, msg);
  }
  ::close(fd);
  static_assert(sizeof(SegmentHeader) <= kShmLine && sizeof(Doorbell) <= kShmLine, "both fit before the rings");
  new (static_cast<uint8_t*>(base) + kShmLine) Doorbell();
  for (int i = 0; i < size; ++i)
    new (static_cast<uint8_t*>(base) + kPage + i * sizeof(ShmRingHeader)) ShmRingHeader();
  SegmentHeader* h = header(base);
  h->version = kSegmentVersion;
  h->rank = rank;
  h->size = size;
  h->pid = static_cast<int32_t>(::getpid());
  h->ring_bytes = ring_bytes;
  h->stride = stride(ring_bytes);
  h->data_offset = data_offset(size);
  h->magic = kSegmentMagic;
  return std::shared_ptr<ShmSegment>(new ShmSegment(name, base, len));
}

std::shared_ptr<ShmSegment> ShmSegment::open(const std::string& name, int rank, int size, int pid) {
  int fd = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) throw_error(ErrorKind::PeerFailure, errno_text("cannot open", name));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_uid != ::geteuid() || static_cast<size_t>(st.st_size) < kPage) {
    ::close(fd);
    throw_error(ErrorKind::PeerFailure, "shared memory " + name + " is not a ring segment of this user");
  }
  size_t len = static_cast<size_t>(st.st_size);
  void* base = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (base == MAP_FAILED) throw_error(ErrorKind::PeerFailure, errno_text("cannot map", name));
  std::shared_ptr<ShmSegment> seg(new ShmSegment(name, base, len));
  const SegmentHeader* h = header(base);
  bool ok = h->magic == kSegmentMagic && h->version == kSegmentVersion && h->rank == rank && h->size == size &&
            h->pid == pid && h->ring_bytes > 0 && h->stride == stride(h->ring_bytes) &&
            h->data_offset == data_offset(size) && len == shm_segment_bytes(size, h->ring_bytes);
  if (!ok)
    throw_error(ErrorKind::PeerFailure, "shared memory " + name + " does not belong to rank " + std::to_string(rank) +
                                            " (pid " + std::to_string(pid) + ") of a job of " + std::to_string(size) +
                                            " ranks");
  return seg;
}

ShmSegment::~ShmSegment() { ::munmap(base_, len_); }

int ShmSegment::pid() const { return header(base_)->pid; }
size_t ShmSegment::ring_bytes() const { return header(base_)->ring_bytes; }

ShmRingHeader* ShmSegment::ring(int sender) const {
  return reinterpret_cast<ShmRingHeader*>(static_cast<uint8_t*>(base_) + kPage + sender * sizeof(ShmRingHeader));
}

Doorbell* ShmSegment::doorbell() const {
  return reinterpret_cast<Doorbell*>(static_cast<uint8_t*>(base_) + kShmLine);
}

uint8_t* ShmSegment::data(int sender) const {
  const SegmentHeader* h = header(base_);
  return static_cast<uint8_t*>(base_) + h->data_offset + sender * h->stride;
}

void ShmSegment::unlink() {
  if (unlinked_) return;
  unlinked_ = true;
  ::shm_unlink(name_.c_str());
}

ShmChannel::ShmChannel(std::shared_ptr<ShmSegment> own, std::shared_ptr<ShmSegment> peer, int my_rank, int peer_rank)
    : own_(std::move(own)), peer_(std::move(peer)) {
  peer_pid_ = peer_->pid();
  // The peer published its endpoint moments ago, so a pid that already
  // looks dead most likely lives in another pid namespace (shared /dev/shm,
  // separate pids). Watching it would report a live peer as dead: rely on
  // the closed flag and the Mesh timeout instead.
  if (peer_pid_ > 0 && peer_pid_ != static_cast<int>(::getpid())) {
    const char state = process_state(peer_pid_);
    if (state == 'Z' || state == 'X') peer_pid_ = -1;
  }
  out_ = peer_->ring(my_rank);
  out_data_ = peer_->data(my_rank);
  out_cap_ = peer_->ring_bytes();
  out_head_ = out_->head.load(std::memory_order_relaxed);
  out_tail_seen_ = out_->tail.load(std::memory_order_acquire);
  in_ = own_->ring(peer_rank);
  in_data_ = own_->data(peer_rank);
  in_cap_ = own_->ring_bytes();
  in_tail_ = in_->tail.load(std::memory_order_relaxed);
  in_head_seen_ = in_->head.load(std::memory_order_acquire);
  prefault(out_data_, out_cap_);
  prefault(in_data_, in_cap_);
  out_->attached.store(1, std::memory_order_release);
}

void ShmChannel::fail_closed() { throw_error(ErrorKind::PeerFailure, "peer closed its channel"); }

size_t ShmChannel::space_for(size_t wanted) {
  if (closed_) throw_error(ErrorKind::PeerFailure, "channel already closed by this rank");
  // The peer closing its side means it will not read ours any more. The
  // flag sits on a line that is written once, so this load stays in cache.
  if (in_->closed.load(std::memory_order_relaxed)) fail_closed();
  size_t space = out_cap_ - static_cast<size_t>(out_head_ - out_tail_seen_);
  if (space < wanted) {
    // Acquire: the consumer finished reading those bytes before moving
    // tail, so we may overwrite them.
    out_tail_seen_ = out_->tail.load(std::memory_order_acquire);
    space = out_cap_ - static_cast<size_t>(out_head_ - out_tail_seen_);
  }
  return space;
}

void ShmChannel::put(const uint8_t* buf, size_t len) {
  const size_t pos = static_cast<size_t>(out_head_ % out_cap_);
  const size_t first = std::min(len, out_cap_ - pos);
  std::memcpy(out_data_ + pos, buf, first);
  if (first < len) std::memcpy(out_data_, buf + first, len - first);
  out_head_ += len;
}

void ShmChannel::publish() {
  out_->head.store(out_head_, std::memory_order_release);  // publishes the bytes
  ring_doorbell(peer_->doorbell());
}

size_t ShmChannel::try_write(const uint8_t* buf, size_t len) {
  const Piece one{buf, len};
  return try_write_pieces(&one, 1);
}

size_t ShmChannel::try_write_pieces(const Piece* pieces, size_t count) {
  size_t wanted = 0;
  for (size_t i = 0; i < count; ++i) wanted += pieces[i].len;
  size_t space = space_for(wanted), total = 0;
  for (size_t i = 0; i < count && space > 0; ++i) {
    const size_t n = std::min(pieces[i].len, space);
    put(pieces[i].data, n);
    space -= n;
    total += n;
  }
  if (total > 0) publish();
  return total;
}

bool ShmChannel::writable() {
  if (closed_ || in_->closed.load(std::memory_order_relaxed)) return true;  // try_write will say why
  out_tail_seen_ = out_->tail.load(std::memory_order_acquire);
  return out_head_ - out_tail_seen_ < out_cap_;
}

std::pair<const uint8_t*, size_t> ShmChannel::peek(size_t max) {
  if (closed_) throw_error(ErrorKind::PeerFailure, "channel already closed by this rank");
  if (in_head_seen_ == in_tail_) {
    in_head_seen_ = in_->head.load(std::memory_order_acquire);  // pairs with the producer's release
    if (in_head_seen_ == in_tail_) {
      // closed is stored after the last head, so a fresh head load after
      // seeing closed cannot miss bytes.
      if (!in_->closed.load(std::memory_order_acquire)) return {nullptr, 0};
      in_head_seen_ = in_->head.load(std::memory_order_acquire);
      if (in_head_seen_ == in_tail_) fail_closed();
    }
  }
  size_t avail = static_cast<size_t>(in_head_seen_ - in_tail_);
  size_t pos = static_cast<size_t>(in_tail_ % in_cap_);
  size_t n = std::min({max, avail, in_cap_ - pos});
  return {n ? in_data_ + pos : nullptr, n};
}

void ShmChannel::consume(size_t n) {
  if (n == 0) return;
  in_tail_ += n;
  in_->tail.store(in_tail_, std::memory_order_release);  // we are done reading those bytes
  ring_doorbell(peer_->doorbell());  // the peer may be waiting for space
}

void ShmChannel::check_alive() {
  if (in_->closed.load(std::memory_order_acquire) && in_->head.load(std::memory_order_acquire) == in_tail_)
    fail_closed();
  // Ranks run as threads of one process in tests: our own pid is alive.
  if (peer_pid_ <= 0 || peer_pid_ == static_cast<int>(::getpid())) return;
  const char state = process_state(peer_pid_);
  if (state == 'Z' || state == 'X') throw_error(ErrorKind::PeerFailure, "process " + std::to_string(peer_pid_) + " exited");
  const bool stopped = state == 'T' || state == 't';
  const auto now = std::chrono::steady_clock::now();
  if (!stopped || stopped_peer_limit_s <= 0) {
    stopped_since_.reset();
  } else if (!stopped_since_) {
    stopped_since_ = now;
  } else if (std::chrono::duration<double>(now - *stopped_since_).count() > stopped_peer_limit_s) {
    throw_error(ErrorKind::PeerFailure, "process " + std::to_string(peer_pid_) +
                                            " has been stopped (SIGSTOP or a debugger) for more than " +
                                            std::to_string(static_cast<int>(stopped_peer_limit_s)) + " s");
  }
}

void ShmChannel::close() {
  if (closed_) return;
  closed_ = true;
  out_->closed.store(1, std::memory_order_release);  // after our last head store
  ring_doorbell(peer_->doorbell());
}

}  // namespace ring
