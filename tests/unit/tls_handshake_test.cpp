// The TLS handshake pacer (base/net/tls_handshake.cpp) against real CAF
// actor systems with mutual TLS on loopback: a handshake that waits for a
// silent peer costs no CPU on either side (CAF 0.17.6 alone spins a thread
// at 100 % of a core: issue #1060), and handshakes with live peers still
// complete, with no socket left waiting afterwards; the connection watchdog
// stops scanning once such a peer proved itself.

#include "base/internal/actor_system.hpp"
#include "base/net/cert_authority.hpp"
#include "base/net/connection_watchdog.hpp"
#include "base/net/tls_handshake.hpp"
#include "base/net/transport.hpp"
#include <hvactor/tls.hpp>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <doctest/doctest.h>

#include "unit_temp_dir.hpp"

using namespace std::chrono_literals;
namespace tls = hvactor::tls;

namespace {

/// CPU seconds this process used so far (every thread).
double cpu_seconds() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  auto sec = [](const timeval& tv) { return double(tv.tv_sec) + double(tv.tv_usec) / 1e6; };
  return sec(ru.ru_utime) + sec(ru.ru_stime);
}

/// A loopback TCP socket, closed on scope exit.
struct tcp_socket {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  tcp_socket() {
    REQUIRE(fd >= 0);
  }
  ~tcp_socket() {
    ::close(fd);
  }
  static sockaddr_in loopback(uint16_t port) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(port);
    return addr;
  }
};

/// An actor system that talks mutual TLS with the identity `name` issued
/// in `dir` (with its config, which CAF reads for as long as it runs).
struct tls_system {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;

  tls_system(const std::string& dir, const std::string& name) {
    tls::config id{dir + "/" + name + ".pem", dir + "/" + name + ".key", dir + "/ca.pem", ""};
    tls::validate(id);
    hvactor::configure_actor_system(cfg, 2, id);
    sys = std::make_unique<caf::actor_system>(cfg);
  }
  caf::actor_system& operator*() {
    return *sys;
  }
  caf::actor_system* operator->() {
    return sys.get();
  }
};

caf::behavior echo(caf::event_based_actor*) {
  return {[](const std::string& s) { return s; }};
}

} // namespace

TEST_SUITE("tls handshake") {

TEST_CASE("a server whose TLS handshake waits for a silent client uses no CPU") {
  hvactor_test::temp_dir tmp{"hvactor-tls-pace"};
  auto dir = tmp.path.string();
  tls::make_certificates(dir, {"server"});
  tls_system sys{dir, "server"};
  auto actor = sys->spawn(echo);
  auto port = hvactor::transport::publish(*sys, actor, 0, "127.0.0.1");
  REQUIRE(port);
  {
    tcp_socket silent; // connects and never sends a ClientHello
    auto addr = tcp_socket::loopback(*port);
    REQUIRE(::connect(silent.fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    std::this_thread::sleep_for(300ms); // accepted; the server's handshake is queued
    auto before = cpu_seconds();
    std::this_thread::sleep_for(1500ms);
    auto used = cpu_seconds() - before;
    INFO("CPU seconds used in 1.5 s: " << used);
    CHECK(used < 0.3); // CAF alone: about 1.5 (one thread at 100 %)
    CHECK(hvactor::tls_handshake::waiting() >= 1);
  }
  hvactor::transport::unpublish(*sys, actor, *port);
  caf::anon_send_exit(actor, caf::exit_reason::user_shutdown);
}

TEST_CASE("a client whose TLS handshake waits for a silent server uses no CPU") {
  hvactor_test::temp_dir tmp{"hvactor-tls-pace"};
  auto dir = tmp.path.string();
  tls::make_certificates(dir, {"client"});
  tcp_socket server; // listens, accepts and never answers
  auto addr = tcp_socket::loopback(0);
  REQUIRE(::bind(server.fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(::listen(server.fd, 4) == 0);
  socklen_t len = sizeof addr;
  REQUIRE(::getsockname(server.fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  tls_system sys{dir, "client"};
  auto before = cpu_seconds();
  auto found = hvactor::transport::connect(*sys, "127.0.0.1", ntohs(addr.sin_port), 1500ms);
  auto used = cpu_seconds() - before;
  CHECK_FALSE(found);
  INFO("CPU seconds used while connecting for 1.5 s: " << used);
  CHECK(used < 0.4); // CAF alone: about 1.5
  ::shutdown(server.fd, SHUT_RDWR);
}

TEST_CASE("handshakes with live peers complete, and nothing is left waiting") {
  hvactor_test::temp_dir tmp{"hvactor-tls-pace"};
  auto dir = tmp.path.string();
  tls::make_certificates(dir, {"server", "client"});
  tls_system server{dir, "server"};
  auto actor = server->spawn(echo);
  auto port = hvactor::transport::publish(*server, actor, 0, "127.0.0.1");
  REQUIRE(port);
  auto pauses_before = hvactor::tls_handshake::pauses();
  {
    tls_system client{dir, "client"};
    auto found = hvactor::transport::connect(*client, "127.0.0.1", *port, 5s);
    REQUIRE(found);
    auto target = caf::actor_cast<caf::actor>(*found);
    for (int i = 0; i < 20; ++i) {
      auto reply = hvactor::ask<std::string>(*client, target, 5s, "ping " + std::to_string(i));
      REQUIRE(reply);
      CHECK(*reply == "ping " + std::to_string(i));
    }
    CHECK(hvactor::tls_handshake::pauses() > pauses_before); // both sides waited for a flight
    CHECK(hvactor::tls_handshake::waiting() == 0);
  }
  hvactor::transport::unpublish(*server, actor, *port);
  caf::anon_send_exit(actor, caf::exit_reason::user_shutdown);
}

TEST_CASE("the connection watchdog lets an authenticated live peer be, and then sleeps") {
  hvactor_test::temp_dir tmp{"hvactor-tls-pace"};
  auto dir = tmp.path.string();
  tls::make_certificates(dir, {"server", "client"});
  tls_system server{dir, "server"};
  auto actor = server->spawn(echo);
  auto port = hvactor::transport::publish(*server, actor, 0, "127.0.0.1");
  REQUIRE(port);
  // Heartbeats every knobs::heartbeat_interval (4 s): an idle limit of 5 s
  // keeps the live peer.
  hvactor::connection_watchdog::options o;
  o.idle_limit = 5s;
  o.period = 200ms;
  hvactor::connection_watchdog dog{o};
  dog.watch(*port);
  {
    tls_system client{dir, "client"};
    auto found = hvactor::transport::connect(*client, "127.0.0.1", *port, 5s);
    REQUIRE(found);
    CHECK(dog.scanning()); // an accepted connection: not proven yet
    // Proven once it received a heartbeat after it was 5 s old.
    bool slept = false;
    for (int i = 0; i < 100 && !slept; ++i) {
      std::this_thread::sleep_for(100ms);
      slept = !dog.scanning();
    }
    CHECK(slept);
    CHECK(dog.shut_down_count() == 0);
    auto reply = hvactor::ask<std::string>(*client, caf::actor_cast<caf::actor>(*found), 5s,
                                           std::string{"still there"});
    CHECK(reply);
  }
  hvactor::transport::unpublish(*server, actor, *port);
  caf::anon_send_exit(actor, caf::exit_reason::user_shutdown);
}

} // TEST_SUITE
