#pragma once

// The dashboard's connections (server.cpp answers the requests). One thread
// accepts and reads every connection without blocking; a few workers only
// ever see whole requests. cpp-httplib 0.11.4 gave each connection one of
// its 4 threads for as long as it stayed open, and buffered request lines
// and headers without a limit: with 8 idle and 6 slowloris connections no
// request was answered within 30 s, and 4 request lines of 48 MiB grew the
// head by 208 MiB (4 x 48 MiB of headers: 374 MiB; over TLS without a
// token: 193 MiB). cpp-httplib still parses and routes (server.cpp).
//
// - A connection has request_deadline, from its accept or the end of its
//   previous response, to send a whole request head (its TLS handshake
//   included), and max_head_bytes for it; past the deadline it is closed,
//   past the budget it gets 431 and is closed. A request with a body gets
//   413: the dashboard only answers GET and HEAD.
// - The reading thread writes the responses too, without blocking; a
//   client that does not take its response within write_deadline is closed.
// - At most max_connections are open: a new one closes the one that has
//   waited longest for its request (idle keep-alive connections first).
// - The listening socket has SO_REUSEADDR only: cpp-httplib set
//   SO_REUSEPORT, and a second head given a taken port shared it.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include <openssl/ssl.h>

namespace hvactor::dashboard {

struct front_limits {
  size_t max_head_bytes = 16 * 1024;
  std::chrono::milliseconds request_deadline{10'000};
  std::chrono::milliseconds write_deadline{10'000};
  size_t max_connections = 256;
  size_t workers = 4;
  /// Requests one connection may send; the last one's response closes it.
  size_t keep_alive_requests = 100;
};

/// The two ends of a request's connection, and its TLS session (null in
/// plain HTTP).
struct peer {
  std::string remote_ip;
  int remote_port = 0;
  std::string local_ip;
  int local_port = 0;
  const SSL* ssl = nullptr;
};

/// Answers one request head (request line and headers up to the blank
/// line) with the whole response; sets `close` when the connection ends
/// after it. `last`: the connection's last request (say Connection: close).
/// Runs on a worker thread.
using responder =
  std::function<std::string(std::string_view head, const peer& who, bool last, bool& close)>;

class front {
public:
  /// Listens on host:port (port 0: a free one); std::runtime_error naming
  /// the address, and that the port is taken when it is. `tls`: null for
  /// plain HTTP, else the context of every handshake (the caller's, alive
  /// until this is destroyed).
  front(const std::string& host, int port, SSL_CTX* tls, front_limits limits = {});
  ~front();
  front(const front&) = delete;
  front& operator=(const front&) = delete;

  uint16_t port() const;

  /// Starts accepting; `answer` serves every request from now on.
  void start(responder answer);

  struct state;

private:
  std::unique_ptr<state> s_;
};

} // namespace hvactor::dashboard
