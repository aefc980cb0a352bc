// The port guard's framing check on an accepted connection: a handshake
// header that announces no payload is refused before CAF reads it (CAF
// 0.17.6 dereferences the missing payload and the process dies of SIGSEGV);
// handshakes with a payload, and heartbeats, pass untouched.

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <vector>

#include <doctest/doctest.h>

#include "base/net/port_guard.hpp"

namespace guard = hvactor::port_guard;

namespace {

/// A BASP header (operation, payload_len; everything else 0 but
/// operation_data, which a server handshake needs non-zero) and `payload`.
std::vector<uint8_t> frame(uint8_t op, uint32_t len, std::vector<uint8_t> payload = {}) {
  std::vector<uint8_t> out(32, 0);
  out[0] = op;
  uint32_t len_be = htonl(len);
  std::memcpy(out.data() + 4, &len_be, 4);
  if (op == 0)
    out[15] = 1;
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

/// A listening socket on 127.0.0.1 whose port the guard watches.
struct guarded_listener {
  int fd = -1;
  uint16_t port = 0;
  guarded_listener() {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::listen(fd, 8) == 0);
    socklen_t len = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
    guard::watch(port);
  }
  ~guarded_listener() {
    guard::unwatch(port);
    ::close(fd);
  }

  /// Sends `bytes` from a new client and returns what the guarded recv of
  /// the accepted end gives: the byte count, or -errno.
  ssize_t deliver(const std::vector<uint8_t>& bytes) {
    int c = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(port);
    REQUIRE(::connect(c, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    int s = ::accept(fd, nullptr, nullptr);
    REQUIRE(s >= 0);
    REQUIRE(::send(c, bytes.data(), bytes.size(), 0) == static_cast<ssize_t>(bytes.size()));
    timeval tv{2, 0};
    ::setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    std::vector<uint8_t> buf(bytes.size());
    ssize_t got = 0;
    while (got < static_cast<ssize_t>(buf.size())) {
      auto n = ::recv(s, buf.data() + got, buf.size() - static_cast<size_t>(got), 0);
      if (n <= 0) {
        got = n < 0 ? -errno : got;
        break;
      }
      got += n;
    }
    ::close(s);
    ::close(c);
    return got;
  }
};

} // namespace

TEST_CASE("port guard: a handshake without a payload is refused before CAF reads it") {
  auto saved = guard::current();
  auto p = saved;
  p.same_user = false;
  p.check_frames = true;
  guard::configure(p);
  {
    guarded_listener l;
    auto before = guard::refused().empty_handshakes;
    CHECK(l.deliver(frame(1, 0)) == -ECONNRESET); // client handshake
    CHECK(l.deliver(frame(0, 0)) == -ECONNRESET); // server handshake
    // Behind a valid frame in the same read, too.
    auto both = frame(6, 0);
    auto empty = frame(1, 0);
    both.insert(both.end(), empty.begin(), empty.end());
    CHECK(l.deliver(both) == -ECONNRESET);
    CHECK(guard::refused().empty_handshakes == before + 3);
    // What CAF's peers send passes.
    CHECK(l.deliver(frame(1, 8, std::vector<uint8_t>(8, 7))) == 40);
    CHECK(l.deliver(frame(0, 4, std::vector<uint8_t>(4, 7))) == 36);
    CHECK(l.deliver(frame(6, 0)) == 32); // heartbeat
    CHECK(guard::refused().empty_handshakes == before + 3);
  }
  guard::configure(saved);
}
