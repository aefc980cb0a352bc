// The port guard's per-port connection count when an entry is reused: a
// connection accepted on an earlier port must not be subtracted from the
// next port's count when it closes (a test run once saw every worker of a
// job refused as "1024 connections already" on a reused port number).

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <utility>

#include <doctest/doctest.h>

#include "base/net/port_guard.hpp"

namespace guard = hvactor::port_guard;

namespace {

struct listener {
  int fd = -1;
  uint16_t port = 0;
  listener() {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::listen(fd, 8) == 0);
    // Nonblocking, as CAF's listeners are.
    ::fcntl(fd, F_SETFL, O_NONBLOCK);
    socklen_t len = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
  }
  ~listener() {
    ::close(fd);
  }
  /// Connects a client and accepts it through the guard; -1 if refused.
  std::pair<int, int> connect_and_accept() {
    int c = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(port);
    REQUIRE(::connect(c, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    return {c, ::accept(fd, nullptr, nullptr)};
  }
};

} // namespace

TEST_CASE("port guard: closing a connection of a port's earlier owner leaves the new count alone") {
  auto saved = guard::current();
  auto p = saved;
  p.max_connections = 2;
  p.same_user = false;
  guard::configure(p);
  {
    listener a;
    guard::watch(a.port);
    auto [ca, sa] = a.connect_and_accept();
    REQUIRE(sa >= 0);
    guard::unwatch(a.port);
    listener b;
    guard::watch(b.port); // takes the entry a just left
    ::close(sa);          // counted under a: must not touch b's count
    ::close(ca);
    auto [c1, s1] = b.connect_and_accept();
    auto [c2, s2] = b.connect_and_accept();
    CHECK(s1 >= 0);
    CHECK(s2 >= 0);
    // The cap still holds for b.
    auto [c3, s3] = b.connect_and_accept();
    CHECK(s3 < 0);
    for (int fd : {c1, s1, c2, s2, c3})
      if (fd >= 0)
        ::close(fd);
    guard::unwatch(b.port);
  }
  guard::configure(saved);
}
