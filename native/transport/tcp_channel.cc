#include "transport/tcp_channel.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/error.h"

namespace ring {
namespace {

constexpr int kSocketBufferBytes = 4 << 20;

void set_nonblocking(int fd) {
  int flags = ::fcntl(fd, F_GETFL, 0);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

// Resolves host:port (numeric port) for a stream socket; nullptr and
// *error on failure. The caller frees the list.
addrinfo* resolve(const std::string& host, int port, bool passive, std::string* error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* res = nullptr;
  int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0) {
    *error = std::string("cannot resolve '") + host + "': " + ::gai_strerror(rc);
    return nullptr;
  }
  return res;
}

}  // namespace

TcpChannel::TcpChannel(int fd) : fd_(fd), stage_(new uint8_t[kStageBytes]) {
  set_nonblocking(fd_);
  int one = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

TcpChannel::~TcpChannel() {
  if (fd_ >= 0) ::close(fd_);
}

void TcpChannel::fail(int err) {
  if (err == EPIPE || err == ECONNRESET || err == 0)
    throw_error(ErrorKind::PeerFailure, "connection closed by peer");
  throw_error(ErrorKind::PeerFailure, std::string("connection failed: ") + std::strerror(err));
}

size_t TcpChannel::try_write(const uint8_t* buf, size_t len) {
  if (closed_) throw_error(ErrorKind::PeerFailure, "channel already closed by this rank");
  for (;;) {
    ssize_t n = ::send(fd_, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) return static_cast<size_t>(n);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    fail(errno);
  }
}

size_t TcpChannel::try_write_pieces(const Piece* pieces, size_t count) {
  if (closed_) throw_error(ErrorKind::PeerFailure, "channel already closed by this rank");
  constexpr size_t kMaxIov = 64;
  iovec iov[kMaxIov];
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = std::min(count, kMaxIov);
  for (size_t i = 0; i < msg.msg_iovlen; ++i) iov[i] = {const_cast<uint8_t*>(pieces[i].data), pieces[i].len};
  for (;;) {
    ssize_t n = ::sendmsg(fd_, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) return static_cast<size_t>(n);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    fail(errno);
  }
}

std::pair<const uint8_t*, size_t> TcpChannel::peek(size_t max) {
  if (begin_ == end_) {
    if (closed_) throw_error(ErrorKind::PeerFailure, "channel already closed by this rank");
    if (eof_) fail(0);
    begin_ = end_ = 0;
    for (;;) {
      ssize_t n = ::recv(fd_, stage_.get(), kStageBytes, MSG_DONTWAIT);
      if (n > 0) {
        end_ = static_cast<size_t>(n);
        break;
      }
      if (n == 0) {
        eof_ = true;
        fail(0);
      }
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return {nullptr, 0};
      fail(errno);
    }
  }
  size_t n = std::min(max, end_ - begin_);
  return {n ? stage_.get() + begin_ : nullptr, n};
}

void TcpChannel::consume(size_t n) { begin_ += n; }

void TcpChannel::check_alive() {
  if (closed_ || fd_ < 0) return;
  pollfd p{fd_, POLLIN | POLLRDHUP, 0};
  if (::poll(&p, 1, 0) <= 0) return;
  if (p.revents & POLLERR) {
    int err = 0;
    socklen_t len = sizeof(err);
    ::getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) fail(err);
  }
  if (p.revents & (POLLRDHUP | POLLHUP)) {
    // The peer closed. Bytes it sent before that are still ours to read;
    // only a FIN with nothing in front of it means it is gone.
    uint8_t byte;
    ssize_t n = ::recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0 && begin_ == end_) {
      eof_ = true;
      fail(0);
    }
  }
}

void TcpChannel::set_dead_link_timeout(double seconds) {
  if (fd_ < 0 || !(seconds > 0)) return;
  // Idle links are probed every third of the timeout; unacknowledged data or
  // probes for `seconds` make the kernel fail the socket with ETIMEDOUT,
  // which check_alive() and the next read or write report. Best effort.
  int on = 1;
  int probe_s = static_cast<int>(std::min(std::max(std::ceil(seconds / 3.0), 1.0), 32767.0));
  int probes = 3;
  unsigned user_ms = static_cast<unsigned>(std::min(seconds * 1000.0, 2147483647.0));
  ::setsockopt(fd_, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on));
  ::setsockopt(fd_, IPPROTO_TCP, TCP_KEEPIDLE, &probe_s, sizeof(probe_s));
  ::setsockopt(fd_, IPPROTO_TCP, TCP_KEEPINTVL, &probe_s, sizeof(probe_s));
  ::setsockopt(fd_, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof(probes));
  ::setsockopt(fd_, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_ms, sizeof(user_ms));
}

void TcpChannel::close() {
  if (closed_ || fd_ < 0) return;
  closed_ = true;
  ::shutdown(fd_, SHUT_RDWR);
}

void tune_socket(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  int bytes = kSocketBufferBytes;
  // Best effort: unprivileged processes get at most the sysctl maximum.
  ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes));
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
}

int listen_tcp(const std::string& host, int* port) {
  std::string error;
  addrinfo* res = resolve(host, 0, true, &error);
  if (!res) throw_error(ErrorKind::BadArgument, "cannot listen: " + error);
  int fd = -1;
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    if (fd < 0) {
      error = std::strerror(errno);
      continue;
    }
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    tune_socket(fd);  // accepted sockets inherit the buffer sizes
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd, 128) == 0) break;
    error = std::strerror(errno);
    ::close(fd);
    fd = -1;
  }
  ::freeaddrinfo(res);
  if (fd < 0) throw_error(ErrorKind::Internal, "cannot listen on " + host + ": " + error);
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  *port = addr.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                                     : ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  return fd;
}

int start_connect(const std::string& host, int port, std::string* error) {
  addrinfo* res = resolve(host, port, false, error);
  if (!res) return -1;
  // The first address only: endpoints advertise one concrete address.
  int fd = ::socket(res->ai_family, res->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, res->ai_protocol);
  if (fd < 0) {
    *error = std::strerror(errno);
  } else {
    tune_socket(fd);
    if (::connect(fd, res->ai_addr, res->ai_addrlen) != 0 && errno != EINPROGRESS) {
      *error = std::strerror(errno);
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(res);
  return fd;
}

std::string finish_connect(int fd) {
  int err = 0;
  socklen_t len = sizeof(err);
  if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
  return err == 0 ? "" : std::strerror(err);
}

}  // namespace ring
