// The connection watchdog against real loopback TCP connections in this
// process: silent connections on a watched port are shut down after the idle
// limit, talking ones survive, the per-port limit drops the surplus at once,
// other ports are never touched, the destructor does not wait a period, and
// with nothing left to watch the watchdog stops scanning until an accept.

#include "base/net/connection_watchdog.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <doctest/doctest.h>

using namespace std::chrono_literals;
using hvactor::connection_watchdog;
using steady = std::chrono::steady_clock;

namespace {

/// A descriptor closed on scope exit.
struct socket_fd {
  int fd = -1;
  explicit socket_fd(int descriptor) : fd(descriptor) {
  }
  socket_fd(socket_fd&& other) noexcept : fd(other.fd) {
    other.fd = -1;
  }
  ~socket_fd() {
    if (fd >= 0)
      ::close(fd);
  }
};

/// A listening socket on the loopback address of `family`, any port.
struct listener {
  socket_fd sock;
  int family;
  uint16_t port = 0;

  explicit listener(int af = AF_INET) : sock(::socket(af, SOCK_STREAM, 0)), family(af) {
    REQUIRE(sock.fd >= 0);
    sockaddr_storage addr{};
    socklen_t len = family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    if (family == AF_INET) {
      auto& in = reinterpret_cast<sockaddr_in&>(addr);
      in.sin_family = AF_INET;
      in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    } else {
      auto& in6 = reinterpret_cast<sockaddr_in6&>(addr);
      in6.sin6_family = AF_INET6;
      in6.sin6_addr = in6addr_loopback;
    }
    if (::bind(sock.fd, reinterpret_cast<sockaddr*>(&addr), len) != 0
        || ::listen(sock.fd, 16) != 0)
      return; // port stays 0: the caller skips (no IPv6 here)
    REQUIRE(::getsockname(sock.fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
    port = ntohs(family == AF_INET ? reinterpret_cast<sockaddr_in&>(addr).sin_port
                                   : reinterpret_cast<sockaddr_in6&>(addr).sin6_port);
  }

  /// A connected client and the accepted server side, in that order.
  std::pair<socket_fd, socket_fd> connect() {
    socket_fd client{::socket(family, SOCK_STREAM, 0)};
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    REQUIRE(::getsockname(sock.fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
    REQUIRE(::connect(client.fd, reinterpret_cast<sockaddr*>(&addr), len) == 0);
    socket_fd server{::accept(sock.fd, nullptr, nullptr)};
    REQUIRE(server.fd >= 0);
    return {std::move(client), std::move(server)};
  }
};

/// True if `fd` reads end of stream within `timeout`; data is skipped.
bool sees_eof(int fd, std::chrono::milliseconds timeout) {
  auto deadline = steady::now() + timeout;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - steady::now());
    pollfd p{fd, POLLIN, 0};
    if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0)
      return false;
    char buf[64];
    auto n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n == 0)
      return true;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
      return true; // a reset counts as shut down too
  }
}

/// shut_down_count() once it reaches `n` or `timeout` passes: the peer can
/// see EOF before the watchdog thread has counted its shutdown() call.
size_t count_reaching(const connection_watchdog& dog, size_t n,
                      std::chrono::milliseconds timeout = 1000ms) {
  auto deadline = steady::now() + timeout;
  while (dog.shut_down_count() < n && steady::now() < deadline)
    std::this_thread::sleep_for(5ms);
  return dog.shut_down_count();
}

/// True once `pred` holds, within `timeout`.
template <class Pred>
bool wait_for(Pred pred, std::chrono::milliseconds timeout) {
  auto deadline = steady::now() + timeout;
  while (!pred()) {
    if (steady::now() >= deadline)
      return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

connection_watchdog::options opts(std::chrono::milliseconds idle, std::chrono::milliseconds period,
                                  size_t max_connections = 1024) {
  connection_watchdog::options o;
  o.idle_limit = idle;
  o.period = period;
  o.max_connections = max_connections;
  return o;
}

} // namespace

TEST_SUITE("connection_watchdog") {

TEST_CASE("a silent connection on a watched port is shut down after the idle limit") {
  listener lst;
  connection_watchdog dog{opts(300ms, 100ms)};
  dog.watch(lst.port);
  auto start = steady::now();
  auto [client, server] = lst.connect();
  CHECK(sees_eof(client.fd, 2000ms));
  auto elapsed = steady::now() - start;
  CHECK(elapsed >= 300ms);
  CHECK(elapsed < 2000ms);
  CHECK(count_reaching(dog, 1) == 1);
  CHECK(sees_eof(server.fd, 100ms)); // shut down, yet still open: CAF closes it
}

TEST_CASE("a silent IPv6 connection is shut down too") {
  listener lst{AF_INET6};
  if (lst.port == 0) {
    MESSAGE("no IPv6 loopback here; skipped");
    return;
  }
  connection_watchdog dog{opts(200ms, 50ms)};
  dog.watch(lst.port);
  auto [client, server] = lst.connect();
  CHECK(sees_eof(client.fd, 2000ms));
  CHECK(count_reaching(dog, 1) == 1);
}

TEST_CASE("a client that sends a byte every 100 ms survives") {
  listener lst;
  connection_watchdog dog{opts(300ms, 100ms)};
  dog.watch(lst.port);
  auto [client, server] = lst.connect();
  std::atomic<bool> stop{false};
  std::thread talker{[&, fd = client.fd] {
    while (!stop) {
      CHECK(::send(fd, "x", 1, MSG_NOSIGNAL) == 1);
      std::this_thread::sleep_for(100ms);
    }
  }};
  auto shut = sees_eof(client.fd, 1500ms);
  stop = true;
  talker.join();
  CHECK_FALSE(shut);
  CHECK(dog.shut_down_count() == 0);
}

TEST_CASE("beyond max_connections the surplus is shut down at the first scan") {
  listener lst;
  connection_watchdog dog{opts(60s, 1h, 2)};
  dog.watch(lst.port);
  std::vector<std::pair<socket_fd, socket_fd>> conns;
  for (int i = 0; i < 4; ++i)
    conns.push_back(lst.connect());
  dog.scan_once();
  CHECK(dog.shut_down_count() == 2);
  int closed = 0;
  for (auto& [client, server] : conns)
    closed += sees_eof(client.fd, 200ms) ? 1 : 0;
  CHECK(closed == 2);
  dog.scan_once(); // the survivors are within the limit now
  CHECK(dog.shut_down_count() == 2);
}

TEST_CASE("connections on an unwatched port are never touched") {
  listener watched;
  listener other;
  connection_watchdog dog{opts(100ms, 50ms)};
  dog.watch(watched.port);
  auto [client, server] = other.connect();
  CHECK_FALSE(sees_eof(client.fd, 600ms));
  CHECK(dog.shut_down_count() == 0);
  dog.watch(other.port);
  dog.unwatch(other.port);
  auto [client2, server2] = other.connect();
  CHECK_FALSE(sees_eof(client2.fd, 400ms));
  CHECK(dog.shut_down_count() == 0);
}

TEST_CASE("with no connection to watch the watchdog sleeps, and an accept wakes it") {
  listener lst;
  connection_watchdog dog{opts(300ms, 50ms)};
  dog.watch(lst.port);
  CHECK(wait_for([&] { return !dog.scanning(); }, 1000ms)); // one scan found nothing
  auto [client, server] = lst.connect(); // accept() goes through the port guard
  CHECK(dog.scanning());
  // A plain connection never proves itself: watched until it is shut down.
  CHECK(sees_eof(client.fd, 2000ms));
  CHECK(count_reaching(dog, 1) == 1);
  CHECK(wait_for([&] { return !dog.scanning(); }, 1000ms));
}

TEST_CASE("the destructor returns without waiting out the period") {
  auto start = steady::now();
  {
    connection_watchdog dog{opts(1s, 10s)};
    std::this_thread::sleep_for(50ms);
  }
  CHECK(steady::now() - start < 1s);
}

TEST_CASE("bad options are refused") {
  CHECK_THROWS_AS(connection_watchdog{opts(0ms, 100ms)}, std::invalid_argument);
  CHECK_THROWS_AS(connection_watchdog{opts(100ms, 0ms)}, std::invalid_argument);
  CHECK_THROWS_AS(connection_watchdog{opts(100ms, 100ms, 0)}, std::invalid_argument);
}

} // TEST_SUITE
