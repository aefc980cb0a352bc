// The rendezvous store on a real actor system, reached over BASP from a
// second actor system the way worker processes reach it.

#include <chrono>
#include <string>
#include <thread>

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <doctest/doctest.h>

#include "actors/internal/rendezvous_store.hpp"
#include "actors/internal/system_config.hpp"

using namespace std::chrono_literals;
using namespace hvactor::proto;

namespace {

struct two_systems {
  caf::actor_system_config server_cfg;
  caf::actor_system_config client_cfg;
  std::unique_ptr<caf::actor_system> server;
  std::unique_ptr<caf::actor_system> client;
  rendezvous_store store;
  rendezvous_store remote;
  uint16_t port = 0;

  two_systems() {
    hvactor::configure_system(server_cfg, 2);
    hvactor::configure_system(client_cfg, 2);
    server = std::make_unique<caf::actor_system>(server_cfg);
    client = std::make_unique<caf::actor_system>(client_cfg);
    store = hvactor::spawn_rendezvous_store(*server);
    auto p = server->middleman().publish(store, 0, "127.0.0.1", true);
    REQUIRE(p);
    port = *p;
    auto r = client->middleman().remote_actor<rendezvous_store>("127.0.0.1", port);
    REQUIRE(r);
    remote = *r;
  }

  ~two_systems() {
    server->middleman().unpublish(caf::actor_cast<caf::actor>(store), port);
    caf::anon_send_exit(store, caf::exit_reason::user_shutdown);
    store = nullptr;
    remote = nullptr;
  }
};

std::vector<char> bytes(const std::string& s) {
  return {s.begin(), s.end()};
}

} // namespace

TEST_SUITE("rendezvous_store") {

TEST_CASE("a value set in a scope is read back, and scopes do not see each other") {
  two_systems env;
  caf::scoped_actor self{*env.client};
  self->request(env.remote, 5s, set_atom_v, std::string{"job-1/0/global"}, std::string{"rank_0"},
                bytes("host-a"))
    .receive([](bool ok) { CHECK(ok); }, [](caf::error& err) { FAIL(caf::to_string(err)); });
  self->request(env.remote, 5s, get_atom_v, std::string{"job-1/0/global"}, std::string{"rank_0"},
                caf::timespan{1s})
    .receive([](std::vector<char>& v) { CHECK(v == bytes("host-a")); },
             [](caf::error& err) { FAIL(caf::to_string(err)); });
  std::string message;
  self->request(env.remote, 5s, get_atom_v, std::string{"job-1/1/global"}, std::string{"rank_0"},
                caf::timespan{200ms})
    .receive([](std::vector<char>&) { FAIL("a key leaked across generations"); },
             [&](caf::error& err) { message = hvactor::describe(err); });
  CHECK(message.find("job-1/1/global") != std::string::npos);
  CHECK(message.find("rank_0") != std::string::npos);
}

TEST_CASE("a get waits for a key that another peer sets later") {
  two_systems env;
  std::thread setter{[&] {
    std::this_thread::sleep_for(150ms);
    caf::scoped_actor other{*env.server};
    other->request(env.store, 5s, set_atom_v, std::string{"s"}, std::string{"1"}, bytes("late"))
      .receive([](bool) {}, [](caf::error&) {});
  }};
  caf::scoped_actor self{*env.client};
  auto t0 = std::chrono::steady_clock::now();
  self->request(env.remote, 5s, get_atom_v, std::string{"s"}, std::string{"1"}, caf::timespan{3s})
    .receive([](std::vector<char>& v) { CHECK(v == bytes("late")); },
             [](caf::error& err) { FAIL(caf::to_string(err)); });
  CHECK(std::chrono::steady_clock::now() - t0 >= 100ms);
  setter.join();
}

TEST_CASE("wait names the keys that never arrived when its timeout passes") {
  two_systems env;
  caf::scoped_actor self{*env.client};
  self->request(env.remote, 5s, set_atom_v, std::string{"s"}, std::string{"0"}, bytes("x"))
    .receive([](bool) {}, [](caf::error&) {});
  std::string message;
  auto t0 = std::chrono::steady_clock::now();
  self->request(env.remote, 5s, wait_atom_v, std::string{"s"}, key_list{{"0", "1", "3"}},
                caf::timespan{300ms})
    .receive([](bool) { FAIL("wait succeeded without keys 1 and 3"); },
             [&](caf::error& err) { message = hvactor::describe(err); });
  auto elapsed = std::chrono::steady_clock::now() - t0;
  CAPTURE(message);
  CHECK(elapsed >= 300ms);
  CHECK(elapsed < 3s);
  CHECK(message.find("[1, 3]") != std::string::npos);
  CHECK(message.find("300 ms") != std::string::npos);
  // Dropping the scope forgets its keys.
  self->send(env.remote, drop_atom_v, std::string{"s"});
  self->request(env.remote, 5s, wait_atom_v, std::string{"s"}, key_list{{"0"}},
                caf::timespan{100ms})
    .receive([](bool) { FAIL("dropped key still present"); }, [](caf::error&) {});
}

} // TEST_SUITE
