#include "base/net/net.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <stdexcept>

#include <fmt/format.h>

#include "hvactor/errors.hpp"

namespace hvactor::net {

std::pair<std::string, uint16_t> parse_host_port(const std::string& text, const char* what) {
  auto bad = [&](const char* why) {
    return std::invalid_argument(
      fmt::format("{} must be HOST:PORT (e.g. 10.0.0.1:6380): '{}' {}", what, text, why));
  };
  auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0)
    throw bad("has no host or no port");
  auto host = text.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  auto port_text = text.substr(colon + 1);
  if (port_text.empty() || port_text.find_first_not_of("0123456789") != std::string::npos
      || port_text.size() > 5)
    throw bad("has no numeric port");
  auto port = std::stoi(port_text);
  if (port < 1 || port > 65535)
    throw bad("has a port outside 1..65535");
  return {host, static_cast<uint16_t>(port)};
}

bool is_loopback(const std::string& host) {
  if (host == "localhost" || host == "::1")
    return true;
  in_addr a4{};
  if (::inet_pton(AF_INET, host.c_str(), &a4) == 1)
    return (ntohl(a4.s_addr) >> 24) == 127;
  return false;
}

bool is_wildcard(const std::string& host) {
  return host == "0.0.0.0" || host == "::" || host.empty();
}

std::string local_address_towards(const std::string& host) {
  if (is_loopback(host))
    return "127.0.0.1";
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), "9", &hints, &found); rc != 0)
    throw error(fmt::format("cannot resolve '{}': {}", host, ::gai_strerror(rc)));
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> guard{found, ::freeaddrinfo};
  int fd = ::socket(found->ai_family, SOCK_DGRAM, 0);
  if (fd < 0)
    throw error(fmt::format("socket(): {}", std::strerror(errno)));
  std::string out;
  if (::connect(fd, found->ai_addr, found->ai_addrlen) == 0) {
    sockaddr_storage local{};
    socklen_t len = sizeof(local);
    char text[INET6_ADDRSTRLEN] = {0};
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      if (local.ss_family == AF_INET)
        ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&local)->sin_addr, text, sizeof(text));
      else
        ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr, text,
                    sizeof(text));
      out = text;
    }
  }
  int err = errno;
  ::close(fd);
  if (out.empty())
    throw error(fmt::format("no route to '{}': {}", host, std::strerror(err)));
  return out;
}

std::string host_name() {
  char buf[256] = {0};
  ::gethostname(buf, sizeof(buf) - 1);
  return buf;
}

} // namespace hvactor::net
