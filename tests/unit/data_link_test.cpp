// The bulk data link (base/net/data_link.hpp) over real loopback sockets:
// a ticket runs its job once, bytes arrive intact, and every peer that is
// not a cluster member (another user, another CA, no certificate, no or a
// stale ticket) is closed before its job runs.

#include "base/net/data_link.hpp"
#include "base/net/cert_authority.hpp"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include "unit_temp_dir.hpp"
#include <fmt/format.h>

#include <hvactor/errors.hpp>

namespace fs = std::filesystem;
namespace dl = hvactor::data_link;
using namespace std::chrono_literals;

namespace {


hvactor::tls::config identity(const fs::path& dir, const std::string& name) {
  hvactor::tls::config c;
  c.certificate = (dir / (name + ".pem")).string();
  c.key = (dir / (name + ".key")).string();
  c.cafile = (dir / "ca.pem").string();
  return c;
}

dl::server::options plain() {
  dl::server::options o;
  o.host = "127.0.0.1";
  o.io_timeout = 5s;
  return o;
}

// Connects with `t` and reads one u64: what the job sent, or the error.
std::string try_read(uint16_t port, const hvactor::tls::config& tls, const dl::ticket& t) {
  try {
    auto s = dl::connect("127.0.0.1", port, tls, t, 5s);
    return std::to_string(s->read_u64());
  } catch (const std::exception& e) {
    return std::string{"error: "} + e.what();
  }
}

// Waits until the server counted `n` refusals (its thread does so after
// the client saw the close).
bool refused_reaches(const dl::server& srv, uint64_t n) {
  for (int i = 0; i < 500 && srv.refused() < n; ++i)
    std::this_thread::sleep_for(10ms);
  return srv.refused() >= n;
}

} // namespace

TEST_SUITE("data_link") {

TEST_CASE("a ticket runs its job once; a file and frames arrive intact") {
  hvactor_test::temp_dir tmp{"hvactor-link"};
  auto file = tmp.path / "bytes";
  std::vector<char> data(5 * 1024 * 1024 + 17);
  for (size_t i = 0; i < data.size(); ++i)
    data[i] = static_cast<char>(i * 31 + 7);
  std::ofstream{file, std::ios::binary}.write(data.data(), static_cast<std::streamsize>(data.size()));
  dl::server srv{plain()};
  std::atomic<int> runs{0};
  auto t = srv.offer(
    [&](dl::stream& s) {
      ++runs;
      int fd = ::open(file.c_str(), O_RDONLY);
      s.write_u64(data.size());
      s.send_file(fd, 0, data.size());
      ::close(fd);
      s.write_frame("end", 3);
      s.finish();
    },
    10s);
  CHECK(t.size() == 32);
  {
    auto s = dl::connect("127.0.0.1", srv.port(), {}, t, 5s);
    auto n = s->read_u64();
    REQUIRE(n == data.size());
    std::vector<char> got(n);
    s->read(got.data(), got.size());
    CHECK(got == data);
    std::vector<char> frame;
    s->read_frame(frame, 16);
    CHECK(std::string(frame.begin(), frame.end()) == "end");
  }
  // The same ticket again: closed before any job runs.
  CHECK(try_read(srv.port(), {}, t).rfind("error: ", 0) == 0);
  CHECK(refused_reaches(srv, 1));
  CHECK(runs == 1);
}

TEST_CASE("an unknown or expired ticket is refused, and a frame over its bound") {
  dl::server srv{plain()};
  std::atomic<int> runs{0};
  auto stale = srv.offer([&](dl::stream&) { ++runs; }, 1ms);
  std::this_thread::sleep_for(20ms);
  CHECK(try_read(srv.port(), {}, stale).rfind("error: ", 0) == 0);
  CHECK(try_read(srv.port(), {}, std::string(32, 'a')).rfind("error: ", 0) == 0);
  CHECK(refused_reaches(srv, 2));
  CHECK(runs == 0);
  // A peer announcing 1 TiB: refused by the reader before it allocates.
  auto big = srv.offer([](dl::stream& s) { s.write_u64(uint64_t{1} << 40); }, 10s);
  auto s = dl::connect("127.0.0.1", srv.port(), {}, big, 5s);
  std::vector<char> frame;
  CHECK_THROWS_WITH_AS(s->read_frame(frame, 1 << 20),
                       doctest::Contains("announced 1099511627776 bytes"), hvactor::error);
  CHECK(frame.capacity() < (size_t{2} << 20));
}

TEST_CASE("at the connection cap a peer waits to be accepted, then gets its bytes") {
  auto opts = plain();
  opts.max_connections = 1;
  dl::server srv{opts};
  std::atomic<bool> first_done{false};
  auto first = srv.offer(
    [&](dl::stream& s) {
      char c;
      s.read(&c, 1); // holds the only slot until the client sends
      first_done = true;
      s.write_u64(1);
    },
    10s);
  auto second = srv.offer([](dl::stream& s) { s.write_u64(2); }, 10s);
  auto a = dl::connect("127.0.0.1", srv.port(), {}, first, 5s);
  std::this_thread::sleep_for(100ms);
  std::string got;
  std::thread waiter{[&] { got = try_read(srv.port(), {}, second); }};
  std::this_thread::sleep_for(300ms);
  CHECK(got.empty()); // not served while the slot is taken
  a->write("x", 1);
  CHECK(a->read_u64() == 1);
  waiter.join();
  CHECK(got == "2");
  CHECK(first_done);
  CHECK(srv.refused() == 0);
}

TEST_CASE("a server going away cuts a transfer that waits, within its bound") {
  auto srv = std::make_unique<dl::server>(plain());
  auto t = srv->offer(
    [](dl::stream& s) {
      char c;
      s.read(&c, 1); // the client never sends
    },
    10s);
  auto s = dl::connect("127.0.0.1", srv->port(), {}, t, 5s);
  std::this_thread::sleep_for(50ms);
  auto start = std::chrono::steady_clock::now();
  srv.reset();
  CHECK(std::chrono::steady_clock::now() - start < 2s);
  CHECK_THROWS_AS(s->read_u64(), hvactor::error);
}

TEST_CASE("under TLS: a member with a ticket gets its bytes; another CA or no TLS is refused") {
  hvactor_test::temp_dir tmp{"hvactor-link"};
  hvactor::tls::make_certificates((tmp.path / "ours").string(), {"head", "worker"});
  hvactor::tls::make_certificates((tmp.path / "theirs").string(), {"rogue"});
  auto opts = plain();
  opts.tls = identity(tmp.path / "ours", "head");
  dl::server srv{opts};
  std::atomic<int> runs{0};
  auto job = [&](dl::stream& s) {
    ++runs;
    s.write_u64(42);
    s.finish();
  };
  CHECK(try_read(srv.port(), identity(tmp.path / "ours", "worker"), srv.offer(job, 10s)) == "42");
  // Another cluster's certificate, even with a good ticket.
  auto rogue = identity(tmp.path / "theirs", "rogue");
  CHECK(try_read(srv.port(), rogue, srv.offer(job, 10s)).rfind("error: ", 0) == 0);
  // No TLS at all: the ticket bytes are no handshake.
  CHECK(try_read(srv.port(), {}, srv.offer(job, 10s)).rfind("error: ", 0) == 0);
  CHECK(refused_reaches(srv, 2));
  CHECK(runs == 1);
  // A client that trusts only the other CA refuses this server.
  auto wrong_ca = identity(tmp.path / "ours", "worker");
  wrong_ca.cafile = (tmp.path / "theirs" / "ca.pem").string();
  CHECK(try_read(srv.port(), wrong_ca, srv.offer(job, 10s)).rfind("error: ", 0) == 0);
  CHECK(runs == 1);
}

TEST_CASE("another local user is refused on loopback, even with a good ticket") {
  if (::geteuid() != 0 || std::system("command -v setpriv >/dev/null && test -x /usr/bin/python3 2>&1") != 0) {
    MESSAGE("skipped: switching users needs root, setpriv and /usr/bin/python3");
    return;
  }
  dl::server srv{plain()};
  std::atomic<int> runs{0};
  auto t = srv.offer([&](dl::stream& s) { ++runs, s.write_u64(1); }, 10s);
  // The other user connects and sends the ticket; it must read nothing.
  auto cmd = fmt::format("setpriv --reuid=65534 --regid=65534 --clear-groups /usr/bin/python3 -c \"\n"
                         "import socket, sys\n"
                         "s = socket.create_connection(('127.0.0.1', {}))\n"
                         "s.sendall(bytes.fromhex('{}'))\n"
                         "s.settimeout(5)\n"
                         "try:\n  d = s.recv(8)\nexcept OSError:\n  d = b''\n"
                         "sys.exit(3 if d else 0)\n\"",
                         srv.port(), t);
  CHECK(std::system(cmd.c_str()) == 0);
  CHECK(refused_reaches(srv, 1));
  CHECK(runs == 0);
}

}
