// The error paths of hvd::init's rendezvous client, run many times: a
// connect that times out while the middleman is still connecting (once 1
// run in 30 of hvactor-run -x HOROVOD_GLOO_TIMEOUT_SECONDS=0 hung for ever
// in ~actor_system), a store that accepts but never answers, a closed port.
// rendezvous_probe repeats the attempt in one process; every attempt must
// end within a bound. And the timeout's variable: 0, negative or not a
// number is a configuration error naming it.

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <stdexcept>
#include <string>

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <doctest/doctest.h>
#include <hvactor/hvd.hpp>

#include "child_process.hpp"
#include "actors/node/rendezvous_store.hpp"
#include "collectives/rendezvous/rendezvous_client.hpp"
#include "actors/protocol/system_config.hpp"

using namespace std::chrono_literals;

namespace {

/// A rendezvous store published on 127.0.0.1 by an actor system of this
/// process.
struct live_store {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  hvactor::proto::rendezvous_store store;
  uint16_t port = 0;

  live_store() {
    hvactor::configure_system(cfg, 2);
    sys = std::make_unique<caf::actor_system>(cfg);
    store = hvactor::spawn_rendezvous_store(*sys);
    auto p = sys->middleman().publish(store, 0, "127.0.0.1", true);
    REQUIRE(p);
    port = *p;
  }
  ~live_store() {
    sys->middleman().unpublish(caf::actor_cast<caf::actor>(store), port);
    caf::anon_send_exit(store, caf::exit_reason::user_shutdown);
    store = nullptr;
  }
};

/// A TCP port on 127.0.0.1 that accepts connections (the kernel does) and
/// never says a word: a connect's handshake stays pending.
struct silent_listener {
  int fd = -1;
  uint16_t port = 0;
  silent_listener() {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), len) == 0);
    REQUIRE(::listen(fd, 256) == 0);
    REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    port = ntohs(a.sin_port);
  }
  ~silent_listener() {
    ::close(fd);
  }
};

/// A port on 127.0.0.1 nobody listens on (bound once, then closed).
uint16_t closed_port() {
  silent_listener l;
  return l.port;
}

/// Runs rendezvous_probe `count` times against `port` with `timeout_ms`:
/// every attempt must fail (or connect, when `may_connect`) within
/// `per_attempt`; a hang fails the test naming the attempt. Returns the
/// slowest attempt.
std::chrono::milliseconds probe(uint16_t port, int timeout_ms, int count,
                                std::chrono::milliseconds per_attempt, bool may_connect) {
  hvactor::test::temp_dir dir;
  hvactor::test::process p{{HVACTOR_RENDEZVOUS_PROBE, "127.0.0.1", std::to_string(port),
                            std::to_string(timeout_ms), std::to_string(count)},
                           dir.path() / "probe"};
  std::chrono::milliseconds slowest{0};
  int connected = 0;
  for (int i = 1; i <= count; ++i) {
    auto line = p.read_line_with("", per_attempt);
    if (!line) {
      FAIL("attempt " << i << " of " << count << " did not end within " << per_attempt.count()
                      << " ms (a hang on the error path); stderr: " << p.stderr_text());
      return slowest;
    }
    CAPTURE(*line);
    if (line->rfind("connected ", 0) == 0) {
      CHECK(may_connect);
      ++connected;
      continue;
    }
    REQUIRE(line->rfind("failed " + std::to_string(i) + " ", 0) == 0);
    auto ms = std::chrono::milliseconds{std::stoll(line->substr(line->rfind(' ') + 1))};
    slowest = std::max(slowest, ms);
  }
  MESSAGE(count << " attempts, " << connected << " connected; the first error: "
                << p.stderr_text());
  auto st = p.wait_exit(per_attempt);
  REQUIRE(st);
  CHECK(st->exited);
  CHECK(st->code == 0);
  return slowest;
}

/// hvd::init()'s exception with `variable`=`value` in a 2-rank environment,
/// or "" when it does not throw std::invalid_argument.
std::string init_error_with(const char* variable, const char* value) {
  ::setenv("HOROVOD_RANK", "0", 1);
  ::setenv("HOROVOD_SIZE", "2", 1);
  ::setenv(variable, value, 1);
  std::string what;
  try {
    hvactor::hvd::init();
    hvactor::hvd::shutdown();
  } catch (const std::invalid_argument& e) {
    what = e.what();
  } catch (const std::exception& e) {
    what = std::string{"not invalid_argument: "} + e.what();
  }
  for (auto* name : {"HOROVOD_RANK", "HOROVOD_SIZE", variable})
    ::unsetenv(name);
  return what;
}

std::string init_error_with_timeout(const char* value) {
  return init_error_with("HOROVOD_GLOO_TIMEOUT_SECONDS", value);
}

} // namespace

TEST_SUITE("rendezvous client failures") {

TEST_CASE("a connect that times out while the middleman still connects fails and cleans up, 200 "
          "times in a row, each attempt within 10 s") {
  live_store store;
  // 1 ms: shorter than BASP's handshake on loopback, so the answer is
  // still on its way when the client's actor system goes down.
  auto slowest = probe(store.port, 0, 200, 10s, true);
  MESSAGE("slowest attempt: " << slowest.count() << " ms");
  CHECK(slowest < 5s);
}

TEST_CASE("a store that accepts and never answers, and a closed port, fail every attempt within "
          "the timeout plus the clean-up") {
  {
    silent_listener silent;
    auto slowest = probe(silent.port, 200, 20, 10s, false);
    MESSAGE("silent store, slowest attempt: " << slowest.count() << " ms");
    CHECK(slowest >= 200ms);
    CHECK(slowest < 5s);
  }
  auto slowest = probe(closed_port(), 1000, 20, 10s, false);
  MESSAGE("closed port, slowest attempt: " << slowest.count() << " ms");
  CHECK(slowest < 3s);
}

TEST_CASE("HOROVOD_GLOO_TIMEOUT_SECONDS that is 0, negative or not a whole number fails hvd::init "
          "with invalid_argument naming the variable and the value") {
  for (const char* value : {"0", "-3", "abc", "1.5", ""}) {
    CAPTURE(value);
    auto what = init_error_with_timeout(value);
    CAPTURE(what);
    CHECK(what.find("HOROVOD_GLOO_TIMEOUT_SECONDS='" + std::string{value} + "'")
          != std::string::npos);
    CHECK(what.find("> 0") != std::string::npos);
  }
}

TEST_CASE("HOROVOD_FUSION_THRESHOLD and HOROVOD_CYCLE_TIME that are text, negative or absurd fail "
          "hvd::init naming the variable (they became 0 silently)") {
  for (const char* value : {"abc", "-1", "64MB", "", "99999999999999999999", "17179869185"}) {
    CAPTURE(value);
    auto what = init_error_with("HOROVOD_FUSION_THRESHOLD", value);
    CHECK(what.find("HOROVOD_FUSION_THRESHOLD='" + std::string{value} + "' must be a whole number "
                    "of bytes") != std::string::npos);
  }
  for (const char* value : {"abc", "-1", "1ms", "", "nan", "1e9"}) {
    CAPTURE(value);
    auto what = init_error_with("HOROVOD_CYCLE_TIME", value);
    CHECK(what.find("HOROVOD_CYCLE_TIME='" + std::string{value} + "' must be milliseconds")
          != std::string::npos);
  }
}

TEST_CASE("a watch on a scope that the store closes reports the reason once, at once, and stops "
          "asking; a watch whose key is set reports the value") {
  // The elastic driver closes a generation's scope when it supersedes it;
  // Gloo sessions of that generation watch it to stop waiting.
  live_store st;
  hvactor::collectives::rendezvous_client client{"127.0.0.1", st.port, "job/3", 5s};
  std::mutex mu;
  std::vector<std::string> closed, values;
  std::atomic<int> calls{0};
  auto on_set = [&](const std::vector<char>& v) {
    std::lock_guard<std::mutex> lk{mu};
    values.emplace_back(v.begin(), v.end());
    ++calls;
  };
  auto on_closed = [&](const std::string& why) {
    std::lock_guard<std::mutex> lk{mu};
    closed.push_back(why);
    ++calls;
  };
  auto set_later = client.watch("announced", on_set, on_closed);
  auto closed_later = client.watch("never", on_set, on_closed);
  std::this_thread::sleep_for(200ms);
  client.set("announced", {'0', ' ', '3'});
  auto t0 = std::chrono::steady_clock::now();
  caf::anon_send(st.store, hvactor::proto::close_atom_v, std::string{"job/3"},
                 std::string{"generation 4 superseded it"});
  auto deadline = t0 + 3s;
  while (calls.load() < 2 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(5ms);
  auto took = std::chrono::steady_clock::now() - t0;
  std::this_thread::sleep_for(300ms); // a watch that kept asking would report again
  std::lock_guard<std::mutex> lk{mu};
  CHECK(values == std::vector<std::string>{"0 3"});
  REQUIRE(closed.size() == 1);
  CHECK(closed[0].find("generation 4 superseded it") != std::string::npos);
  CHECK(took < 1s);
  // A watch on a scope closed before it began reports at once too.
  hvactor::collectives::rendezvous_client late{"127.0.0.1", st.port, "job/3", 5s};
  std::atomic<bool> told{false};
  auto w = late.watch("x", [](const std::vector<char>&) {},
                      [&](const std::string&) { told = true; });
  for (int i = 0; i < 200 && !told; ++i)
    std::this_thread::sleep_for(5ms);
  CHECK(told);
}

} // TEST_SUITE
