#pragma once

// The pieces of the dashboard's connection loop (front.cpp): a connection's
// state, its reads and writes (plain or TLS, never blocking), the listening
// socket, and what the loop reads of a request head.

#include <poll.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include <openssl/ssl.h>

#include "front.hpp"

namespace hvactor::dashboard::front_io {

using clock = std::chrono::steady_clock;

// handshake (TLS) -> reading -> working (a worker has the request) ->
// writing -> reading ...; only `working` has no deadline (the worker's
// questions to the registry are bounded).
enum class phase { handshake, reading, working, writing };

struct conn {
  int fd = -1;
  SSL* ssl = nullptr;
  phase now = phase::reading;
  short wants = POLLIN;
  clock::time_point since; // when it began to wait for its request
  clock::time_point deadline;
  std::string in; // received, not yet answered
  std::string out;
  size_t sent = 0;
  bool close_after = false;
  size_t served = 0;
  peer who;
};

/// A listening socket on host:port (0: a free port), without SO_REUSEPORT:
/// a port another process listens on is refused (SO_REUSEADDR lets a
/// restarted head take its port back from connections in TIME_WAIT, nothing
/// more, on Linux); std::runtime_error naming the address otherwise.
int listen_on(const std::string& host, int port);

/// One read or write on a connection: the bytes moved, 0 when it would
/// block (c.wants says on what), -1 when the connection is closed or broken.
ssize_t read_some(conn& c, char* buf, size_t n);
ssize_t write_some(conn& c, const char* buf, size_t n);

/// The address (numeric) and port of `ss`.
std::string address_text(const sockaddr_storage& ss, int& port);

/// Where the request head in `in` ends (after its blank line), or npos.
size_t head_end(const std::string& in);

/// Whether a request head announces a body (a Content-Length other than 0,
/// or any Transfer-Encoding).
bool has_body(std::string_view head);

/// A whole plain-text response that closes the connection.
std::string canned(int status, const char* reason, std::string_view text);

/// The first refusals of a kind are logged, then every 1000th: a flood of
/// them must not flood the log.
bool worth_logging(uint64_t n);

} // namespace hvactor::dashboard::front_io
