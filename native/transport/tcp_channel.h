// TcpChannel: a Channel over a connected, authenticated TCP socket, plus the
// few socket helpers the MeshBuilder needs (listen, non-blocking connect).
#pragma once

#include <memory>
#include <string>

#include "transport/channel.h"

namespace ring {

class TcpChannel : public Channel {
 public:
  // Bytes recv()'d per system call; a large stage means few syscalls for
  // large messages (the Mesh hands out the staged span directly).
  static constexpr size_t kStageBytes = 256 << 10;

  // Takes ownership of `fd` (connected, handshake done); makes it
  // non-blocking and sets TCP_NODELAY.
  explicit TcpChannel(int fd);
  ~TcpChannel() override;  // closes the socket

  // Non-blocking send; 0 when the socket buffer is full. PeerFailure on
  // EPIPE / ECONNRESET / any other socket error.
  size_t try_write(const uint8_t* buf, size_t len) override;
  // One sendmsg() of up to kMaxIov pieces.
  size_t try_write_pieces(const Piece* pieces, size_t count) override;
  // Returns staged bytes; recv()s a new stage only when none are left.
  // PeerFailure on EOF (once the stage is empty) or a socket error.
  std::pair<const uint8_t*, size_t> peek(size_t max) override;
  void consume(size_t n) override;
  int fd() const override { return fd_; }
  // Polls the socket without blocking: a pending error, or a FIN with
  // nothing left to read, is PeerFailure.
  void check_alive() override;
  void set_dead_link_timeout(double seconds) override;
  // shutdown(SHUT_RDWR): the peer reads EOF after our last bytes. The fd
  // stays open (and fd() valid) until destruction.
  void close() override;

 private:
  [[noreturn]] void fail(int err);
  int fd_;
  bool closed_ = false;
  bool eof_ = false;
  std::unique_ptr<uint8_t[]> stage_;
  size_t begin_ = 0, end_ = 0;  // staged, unconsumed bytes: stage_[begin_, end_)
};

// Sets TCP_NODELAY and asks for large socket buffers (the kernel caps them
// at net.core.{w,r}mem_max). Call before connect()/listen() so the window
// scale negotiated in the SYN allows the larger buffers.
void tune_socket(int fd);

// Opens a non-blocking listening socket on host:0. Returns the fd and
// stores the port the kernel chose. Throws RingError(BadArgument) when the
// host does not resolve, RingError(Internal) when bind/listen fail.
int listen_tcp(const std::string& host, int* port);

// Starts a non-blocking connect to host:port. Returns the fd (the connect
// may still be in progress: wait for POLLOUT, then finish_connect), or -1
// with the reason in *error.
int start_connect(const std::string& host, int port, std::string* error);

// After POLLOUT on a connecting socket: "" when connected, else the reason.
std::string finish_connect(int fd);

}  // namespace ring
