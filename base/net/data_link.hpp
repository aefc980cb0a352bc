#pragma once

// Internal: a connection of its own for bulk bytes (hvactor::train's
// shards, checkpoints and resumes across machines), beside the CAF
// connection that carries the control messages. A CAF message is
// serialized, encrypted and sent by the middleman's one I/O thread; here
// each transfer has a thread and a socket of its own, and the bytes go from
// the file (or the socket) straight into their final buffer.
//
// Who may connect is what may reach any hvactor port:
// - with a TLS identity, every peer (loopback too) completes mutual TLS
//   with a certificate of the cluster CA, and the client checks the
//   server's certificate the same way;
// - without one, only processes of this user on loopback (the kernel's
//   owner of the peer's socket, port_guard::socket_owner), unless the
//   process runs --insecure (port_guard::current().same_user off).
// Then the peer sends a ticket: 16 random bytes the server handed out over
// the authenticated CAF connection (offer()), good for one connection and
// a bounded time. A connection without a known ticket is closed. Every
// read and write is bounded by the server's or client's I/O timeout, and
// at most max_connections are served at once (more wait in the kernel's
// accept queue).

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "hvactor/tls.hpp"

typedef struct ssl_st SSL;
typedef struct ssl_ctx_st SSL_CTX;

namespace hvactor::data_link {

/// One authenticated connection. Not thread-safe. Every call throws
/// hvactor::error on a closed connection, a timeout or a TLS failure.
class stream {
public:
  stream(int fd, SSL* ssl) noexcept : fd_(fd), ssl_(ssl) {}
  ~stream();
  stream(const stream&) = delete;
  stream& operator=(const stream&) = delete;

  /// Writes all `n` bytes.
  void write(const void* data, size_t n);
  /// Reads exactly `n` bytes.
  void read(void* data, size_t n);
  /// Writes `n` bytes of file `fd` from `offset` on (sendfile on a plain
  /// connection; under TLS read in pieces of 1 MiB).
  void send_file(int fd, uint64_t offset, uint64_t n);

  void write_u64(uint64_t v);
  uint64_t read_u64();
  /// A frame: u64 length, then the bytes.
  void write_frame(const void* data, size_t n);
  /// Reads a frame into `out` (resized); hvactor::error when it announces
  /// more than `max` bytes.
  template <class Alloc>
  void read_frame(std::vector<char, Alloc>& out, size_t max) {
    out.resize(read_frame_length(max));
    read(out.data(), out.size());
  }
  /// A frame's length; hvactor::error when it is over `max`.
  size_t read_frame_length(size_t max);

  /// Ends the sending side (TLS close_notify, then a TCP half close).
  void finish();

  /// Takes `ssl` for the handshake and what follows, on this socket.
  void attach(SSL* ssl);
  /// Sends what TLS gathered (read() and finish() do so first).
  void flush();
  /// The TLS handshake, as server or client.
  void handshake(bool as_server);

private:
  int fd_ = -1;
  SSL* ssl_ = nullptr;
};

/// What a server hands out: 32 hex digits.
using ticket = std::string;

/// A listening socket and the threads that serve its connections.
class server {
public:
  struct options {
    /// Address to listen on (port chosen by the kernel).
    std::string host;
    /// The process's TLS identity; empty: plain, see above.
    tls::config tls;
    /// Bound on each read, write and handshake.
    std::chrono::milliseconds io_timeout{30'000};
    /// Connections served at once (a thread each); more wait to be
    /// accepted.
    size_t max_connections = 512;
  };
  using job = std::function<void(stream&)>;

  /// Listens; throws hvactor::error naming the address when it cannot, or
  /// std::invalid_argument for a TLS identity that does not load.
  explicit server(options opts);
  /// Stops accepting, cuts every connection and joins their threads.
  ~server();
  server(const server&) = delete;
  server& operator=(const server&) = delete;

  uint16_t port() const noexcept {
    return port_;
  }

  /// The ticket a peer presents to run `j` on the connection (on a thread
  /// of the server); good once and for `valid_for`. An exception from `j`
  /// is logged and closes the connection.
  ticket offer(job j, std::chrono::milliseconds valid_for);

  /// Connections closed before their job ran: another user, a failed
  /// handshake, an unknown or expired ticket.
  uint64_t refused() const noexcept {
    return refused_.load();
  }

private:
  void accept_loop();
  void serve(int fd, uint64_t id);
  void authenticate(stream& s, int fd);
  void reap_finished();

  options opts_;
  SSL_CTX* ctx_ = nullptr;
  int listen_fd_ = -1;
  int wake_fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> refused_{0};
  std::mutex mu_;
  struct offered {
    job run;
    std::chrono::steady_clock::time_point until;
  };
  std::map<ticket, offered> tickets_;
  struct connection {
    std::thread thread;
    int fd = -1;
    bool finished = false;
  };
  std::map<uint64_t, connection> connections_;
  uint64_t next_connection_ = 0;
  std::thread acceptor_;
};

/// Connects to a server at host:port, authenticates as the server's rules
/// ask (`tls` empty: plain) and presents `t`; each later read and write is
/// bounded by `io_timeout`. hvactor::error naming the address otherwise.
std::unique_ptr<stream> connect(const std::string& host, uint16_t port, const tls::config& tls,
                                const ticket& t, std::chrono::milliseconds io_timeout);

} // namespace hvactor::data_link
