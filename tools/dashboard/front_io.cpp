#include "front_io.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <memory>
#include <stdexcept>

#include <fmt/format.h>
#include <openssl/err.h>

namespace hvactor::dashboard::front_io {

namespace {

std::string lower_trimmed(std::string_view s) {
  auto b = s.find_first_not_of(" \t");
  auto e = s.find_last_not_of(" \t");
  std::string out{b == std::string_view::npos ? std::string_view{} : s.substr(b, e - b + 1)};
  for (auto& c : out)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

} // namespace

// The first refusals of a kind are logged, then every 1000th: a flood of
// them must not flood the log.
bool worth_logging(uint64_t n) {
  return n <= 10 || n % 1000 == 0;
}

std::string address_text(const sockaddr_storage& ss, int& port) {
  char host[INET6_ADDRSTRLEN] = "";
  if (ss.ss_family == AF_INET) {
    auto& in = reinterpret_cast<const sockaddr_in&>(ss);
    ::inet_ntop(AF_INET, &in.sin_addr, host, sizeof(host));
    port = ntohs(in.sin_port);
  } else if (ss.ss_family == AF_INET6) {
    auto& in6 = reinterpret_cast<const sockaddr_in6&>(ss);
    ::inet_ntop(AF_INET6, &in6.sin6_addr, host, sizeof(host));
    port = ntohs(in6.sin6_port);
  }
  return host;
}

// Where the request head in `in` ends (after its blank line), or npos.
size_t head_end(const std::string& in) {
  auto pos = in.find("\r\n\r\n");
  return pos == std::string::npos ? pos : pos + 4;
}

// Whether a request head announces a body (a Content-Length other than 0,
// or any Transfer-Encoding).
bool has_body(std::string_view head) {
  size_t pos = head.find("\r\n") + 2;
  while (pos < head.size()) {
    auto end = head.find("\r\n", pos);
    auto line = head.substr(pos, end - pos);
    pos = end + 2;
    auto colon = line.find(':');
    if (colon == std::string_view::npos)
      continue;
    auto name = lower_trimmed(line.substr(0, colon));
    auto value = lower_trimmed(line.substr(colon + 1));
    if (name == "transfer-encoding" || (name == "content-length" && value != "0"))
      return true;
  }
  return false;
}

std::string canned(int status, const char* reason, std::string_view text) {
  return fmt::format("HTTP/1.1 {} {}\r\nContent-Type: text/plain; charset=utf-8\r\n"
                     "Content-Length: {}\r\nConnection: close\r\nCache-Control: no-store\r\n\r\n{}",
                     status, reason, text.size(), text);
}

// A listening socket on host:port without SO_REUSEPORT: a port another
// process listens on is refused (SO_REUSEADDR lets a restarted head take
// its port back from connections in TIME_WAIT, nothing more, on Linux).
int listen_on(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  auto service = std::to_string(port);
  if (int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found); rc != 0)
    throw std::runtime_error(fmt::format("cannot serve the dashboard on {}:{}: {} (check "
                                         "--dashboard-host)",
                                         host, port, ::gai_strerror(rc)));
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> owned{found, ::freeaddrinfo};
  int err = EADDRNOTAVAIL;
  for (auto* ai = found; ai != nullptr; ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                      ai->ai_protocol);
    if (fd < 0) {
      err = errno;
      continue;
    }
    int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd, 128) == 0)
      return fd;
    err = errno;
    ::close(fd);
  }
  if (err == EADDRINUSE)
    throw std::runtime_error(fmt::format(
      "cannot serve the dashboard on {}:{}: the port is taken (by another head's dashboard?); "
      "pass another --dashboard-port (0 picks a free one) or --include-dashboard false",
      host, port));
  throw std::runtime_error(fmt::format("cannot serve the dashboard on {}:{}: {} (check "
                                       "--dashboard-host and --dashboard-port)",
                                       host, port, std::strerror(err)));
}

// One read or write on a connection: the bytes moved, 0 when it would
// block (c.wants says on what), -1 when the connection is closed or broken.
ssize_t read_some(conn& c, char* buf, size_t n) {
  if (c.ssl != nullptr) {
    ::ERR_clear_error();
    int got = ::SSL_read(c.ssl, buf, static_cast<int>(n));
    if (got > 0)
      return got;
    int e = ::SSL_get_error(c.ssl, got);
    c.wants = e == SSL_ERROR_WANT_WRITE ? POLLOUT : POLLIN;
    return e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE ? 0 : -1;
  }
  auto got = ::recv(c.fd, buf, n, 0);
  if (got > 0)
    return got;
  c.wants = POLLIN;
  return got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) ? 0 : -1;
}

ssize_t write_some(conn& c, const char* buf, size_t n) {
  if (c.ssl != nullptr) {
    ::ERR_clear_error();
    int put = ::SSL_write(c.ssl, buf, static_cast<int>(std::min<size_t>(n, 1 << 20)));
    if (put > 0)
      return put;
    int e = ::SSL_get_error(c.ssl, put);
    c.wants = e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT;
    return e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE ? 0 : -1;
  }
  auto put = ::send(c.fd, buf, n, MSG_NOSIGNAL);
  if (put > 0)
    return put;
  c.wants = POLLOUT;
  return put < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) ? 0 : -1;
}

} // namespace hvactor::dashboard::front_io
