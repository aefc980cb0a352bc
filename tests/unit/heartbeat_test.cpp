// hvactor's CAF heartbeat (base/net/heartbeat.hpp) between real actor
// systems on loopback: ticks start with the first connection, a peer that
// sends no heartbeat is dropped after the connection timeout, two peers
// with heartbeats stay connected while idle, and a system's ticks start
// once however many connections it opens.

#include "base/internal/actor_system.hpp"
#include "base/net/heartbeat.hpp"
#include "base/net/transport.hpp"

#include <chrono>
#include <memory>
#include <thread>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>
#include <doctest/doctest.h>

using namespace std::chrono_literals;

namespace {

/// An actor system with hvactor's settings; `beat`: our heartbeat with a
/// short interval and timeout, else none at all (CAF's is off too).
struct beat_system {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;

  explicit beat_system(bool beat) {
    hvactor::configure_actor_system(cfg, 2, {});
    if (beat)
      hvactor::heartbeat::configure(cfg, caf::timespan{100ms}, caf::timespan{400ms});
    else
      hvactor::heartbeat::configure(cfg, caf::timespan{0}, caf::timespan{0});
    sys = std::make_unique<caf::actor_system>(cfg);
  }
};

caf::behavior echo(caf::event_based_actor*) {
  return {[](int x) { return x; }};
}

/// Connects `client` to the echo actor `server` published, and tells
/// whether the connection went down (a down message for the proxy) within
/// `wait`.
bool dropped_within(beat_system& client, beat_system& server, std::chrono::milliseconds wait) {
  auto actor = server.sys->spawn(echo);
  auto port = hvactor::transport::publish(*server.sys, actor, 0, "127.0.0.1");
  REQUIRE(port);
  auto found = hvactor::transport::connect(*client.sys, "127.0.0.1", *port, 5s);
  REQUIRE(found);
  auto proxy = caf::actor_cast<caf::actor>(*found);
  caf::scoped_actor self{*client.sys};
  self->request(proxy, 2s, 1).receive([](int) {}, [](caf::error&) { FAIL("no answer"); });
  self->monitor(proxy);
  bool down = false;
  self->receive([&](caf::down_msg&) { down = true; }, caf::after(wait) >> [] {});
  hvactor::transport::unpublish(*server.sys, actor, *port);
  caf::anon_send_exit(actor, caf::exit_reason::user_shutdown);
  return down;
}

} // namespace

TEST_SUITE("heartbeat") {

TEST_CASE("a system's ticks start with its first connection, once") {
  beat_system a{true};
  CHECK_FALSE(hvactor::heartbeat::started(*a.sys));
  hvactor::transport::connector(*a.sys);
  CHECK(hvactor::heartbeat::started(*a.sys));
  hvactor::transport::connector(*a.sys); // no second chain of ticks
  CHECK(hvactor::heartbeat::started(*a.sys));
  beat_system quiet{false};
  hvactor::transport::connector(*quiet.sys);
  CHECK_FALSE(hvactor::heartbeat::started(*quiet.sys));
}

TEST_CASE("a peer that sends no heartbeat is dropped after the connection timeout") {
  beat_system client{true};
  beat_system silent_server{false};
  CHECK(dropped_within(client, silent_server, 1500ms)); // 400 ms + a tick
}

TEST_CASE("two idle peers with heartbeats stay connected") {
  beat_system client{true};
  beat_system server{true};
  CHECK_FALSE(dropped_within(client, server, 1500ms));
}

} // TEST_SUITE
