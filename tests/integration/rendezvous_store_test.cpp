// The rendezvous store on a real actor system, reached over BASP from a
// second actor system the way worker processes reach it.

#include <chrono>
#include <string>
#include <thread>

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <doctest/doctest.h>

#include "actors/node/rendezvous_store.hpp"
#include "actors/protocol/system_config.hpp"

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
}

TEST_CASE("a gather of 64 ranks answers every rank in one request each once the last card is in") {
  // Each rank sets its key and asks for all 64 in the same request; the
  // store answers every one of them when the last arrives (waiters are
  // found by the key they miss), with the values in key order.
  two_systems env;
  constexpr int n = 64;
  key_list all;
  for (int r = 0; r < n; ++r)
    all.keys.push_back("mesh/" + std::to_string(r));
  caf::scoped_actor self{*env.client};
  std::vector<caf::message_id> ids;
  auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < n; ++r)
    ids.push_back(self
                    ->request(env.remote, 10s, gather_atom_v, std::string{"job/0"},
                              kv_batch{{all.keys[static_cast<size_t>(r)]},
                                       {bytes("card " + std::to_string(r))}},
                              all, caf::timespan{5s})
                    .id());
  int answered = 0;
  for (auto id : ids) {
    caf::blocking_actor::accept_one_cond one;
    self->varargs_receive(
      one, id,
      [&](kv_found& got) {
        CHECK(got.missing.empty());
        REQUIRE(got.values.size() == static_cast<size_t>(n));
        CHECK(got.values[7] == bytes("card 7"));
        CHECK(got.values[63] == bytes("card 63"));
        ++answered;
      },
      [](caf::error& err) { FAIL(caf::to_string(err)); }, caf::after(std::chrono::seconds{10}) >> [] {});
  }
  CHECK(answered == n);
  CHECK(std::chrono::steady_clock::now() - t0 < 4s);
}

TEST_CASE("a gather that times out answers what is set and the indices of the missing keys") {
  two_systems env;
  caf::scoped_actor self{*env.client};
  auto t0 = std::chrono::steady_clock::now();
  self
    ->request(env.remote, 5s, gather_atom_v, std::string{"s"}, kv_batch{{"0"}, {bytes("a")}},
              key_list{{"0", "1", "2"}}, caf::timespan{300ms})
    .receive(
      [](kv_found& got) {
        CHECK(got.missing == std::vector<int32_t>{1, 2});
        REQUIRE(got.values.size() == 3);
        CHECK(got.values[0] == bytes("a"));
      },
      [](caf::error& err) { FAIL(caf::to_string(err)); });
  CHECK(std::chrono::steady_clock::now() - t0 >= 300ms);
  // A key taken after a wait counted it is waited for again.
  self->request(env.remote, 5s, take_atom_v, std::string{"s"}, std::string{"0"})
    .receive([](std::vector<char>&) {}, [](caf::error& err) { FAIL(caf::to_string(err)); });
  self->request(env.remote, 5s, wait_atom_v, std::string{"s"}, key_list{{"0"}},
                caf::timespan{200ms})
    .receive([](bool) { FAIL("a taken key still counted"); }, [](caf::error&) {});
  // A closed scope fails a gather at once.
  self->send(env.remote, close_atom_v, std::string{"s"}, std::string{"superseded"});
  self->request(env.remote, 5s, gather_atom_v, std::string{"s"}, kv_batch{}, key_list{{"9"}},
                caf::timespan{3s})
    .receive([](kv_found&) { FAIL("a closed scope answered"); },
             [](caf::error& err) { CHECK(hvactor::describe(err).find("superseded") != std::string::npos); });
}

} // TEST_SUITE
