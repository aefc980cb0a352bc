// The one way hvactor blocks on a request (ask) never outlives the actor it
// waits on, timeouts of any size are safe to hand to CAF, and a system that
// does not stop cannot hang a process's exit.

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <thread>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/stateful_actor.hpp>
#include <doctest/doctest.h>

#include "base/internal/actor_system.hpp"
#include "base/internal/caf_error.hpp"
#include "base/internal/knobs_net.hpp"

using namespace std::chrono_literals;

namespace {

struct system_fixture {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;

  system_fixture() {
    hvactor::register_error_category(cfg);
    sys = std::make_unique<caf::actor_system>(cfg);
  }
};

// Answers 42 later (a response promise, as the coordinator answers start),
// then throws from another handler before it does: CAF ends the actor and
// the promise is never delivered. With `hvactor_exit`, its exception
// handler exits with one of hvactor's errors instead of CAF's default.
struct thrower_state {
  caf::response_promise pending;
};

caf::behavior thrower(caf::stateful_actor<thrower_state>* self, bool hvactor_exit) {
  if (hvactor_exit)
    self->set_exception_handler([](caf::scheduled_actor*, std::exception_ptr&) {
      return hvactor::make_error(hvactor::error_kind::worker_error, "the thrower gave up", 3);
    });
  return {
    [=](int32_t x) -> caf::result<int32_t> {
      if (x != 42)
        return x;
      self->state.pending = self->make_response_promise();
      self->send(self, std::string{"boom"});
      return self->state.pending;
    },
    [](const std::string& what) { throw std::runtime_error(what); },
  };
}

} // namespace

TEST_CASE("ask() on an actor that dies from an exception in the handler answers at once with "
          "an error, not after its timeout") {
  system_fixture f;
  auto actor = f.sys->spawn(thrower, false);
  CHECK(*hvactor::ask<int32_t>(*f.sys, actor, 10s, int32_t{7}) == 7);
  auto t0 = std::chrono::steady_clock::now();
  auto res = hvactor::ask<int32_t>(*f.sys, actor, 10s, int32_t{42});
  CHECK(std::chrono::steady_clock::now() - t0 < 2s);
  REQUIRE_FALSE(res);
  CHECK(static_cast<bool>(res.error()));
  INFO(hvactor::describe(res.error()));
  CHECK(hvactor::describe(res.error()).find("terminated") != std::string::npos);
  // Asking the dead actor again also answers at once.
  t0 = std::chrono::steady_clock::now();
  CHECK_FALSE(hvactor::ask<int32_t>(*f.sys, actor, 10s, int32_t{7}));
  CHECK(std::chrono::steady_clock::now() - t0 < 2s);
}

TEST_CASE("an actor that exits with one of hvactor's errors passes it to the waiter as is") {
  system_fixture f;
  auto actor = f.sys->spawn(thrower, true);
  auto res = hvactor::ask<int32_t>(*f.sys, actor, 10s, int32_t{42});
  REQUIRE_FALSE(res);
  CHECK(hvactor::describe(res.error()) == "the thrower gave up");
  CHECK_THROWS_AS(hvactor::throw_caf_error(res.error(), "test"), hvactor::worker_error);
}

TEST_CASE("a blocking actor reused for asks that succeeded keeps no watch on the target") {
  system_fixture f;
  auto actor = f.sys->spawn(thrower, false);
  caf::scoped_actor self{*f.sys};
  for (int32_t i = 100; i < 1100; ++i)
    REQUIRE(*hvactor::ask<int32_t>(*self, actor, 10s, int32_t{i}) == i);
  // The target now dies; the reused actor's mailbox gets nothing from the
  // 1000 finished asks (their watches were detached).
  caf::anon_send_exit(actor, caf::exit_reason::user_shutdown);
  std::this_thread::sleep_for(50ms);
  CHECK(self->mailbox().size() == 0);
}

TEST_CASE("timeouts of any size are clamped before they reach CAF") {
  using ms = std::chrono::milliseconds;
  CHECK(hvactor::wait_bound(ms::max()) == std::chrono::duration_cast<ms>(hvactor::knobs::longest_wait));
  CHECK(hvactor::wait_bound(ms{-5}) == ms::zero());
  CHECK(hvactor::wait_bound(ms{250}) == ms{250});
  auto now = std::chrono::steady_clock::now();
  CHECK(hvactor::deadline_after(now, ms::max()) > now + std::chrono::hours{24 * 365});
  CHECK(hvactor::time_left(hvactor::deadline_after(now, ms::max())) > ms{0});
  // A receive bounded by max() neither fires at once nor overflows.
  system_fixture f;
  auto actor = f.sys->spawn(thrower, false);
  CHECK(*hvactor::ask<int32_t>(*f.sys, actor, ms::max(), int32_t{5}) == 5);
}

// What a child process did: its wait status, how long it took, its stderr.
struct child_run {
  int status = 0;
  std::chrono::steady_clock::duration took{};
  std::string text;
};

// Runs `body` in a forked child with stderr into a file (destroy_bounded
// may end the process it runs in).
template <class Body>
child_run in_child(Body body) {
  char log_path[] = "/tmp/hvactor-destroy-bounded.XXXXXX";
  int log_fd = ::mkstemp(log_path);
  REQUIRE(log_fd >= 0);
  auto started = std::chrono::steady_clock::now();
  pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::dup2(log_fd, STDERR_FILENO);
    body();
    std::_Exit(0);
  }
  child_run out;
  REQUIRE(::waitpid(child, &out.status, 0) == child);
  out.took = std::chrono::steady_clock::now() - started;
  std::ifstream in{log_path};
  out.text.assign(std::istreambuf_iterator<char>{in}, {});
  ::close(log_fd);
  ::unlink(log_path);
  return out;
}

// A system whose actor never ends must not hang the exit: destroy_bounded
// ends the process (exit 1) once its bound passes, says what still runs,
// and first runs the forced-exit hooks (hvactor-run stops the nodes it
// started over ssh there).
TEST_CASE("destroy_bounded exits with 1 after its bound, naming what runs, after the hooks") {
  auto run = in_child([] {
    hvactor::on_forced_exit([] { std::fprintf(stderr, "hook ran\n"); });
    hvactor::on_forced_exit([] { std::fprintf(stderr, "second hook ran\n"); });
    system_fixture f;
    f.sys->spawn([](caf::blocking_actor*) { std::this_thread::sleep_for(30s); });
    hvactor::destroy_bounded(f.sys, 1s);
  });
  INFO(run.text);
  CHECK(WIFEXITED(run.status));
  CHECK(WEXITSTATUS(run.status) == 1);
  CHECK(run.took >= 1s);
  CHECK(run.took < 5s);
  CHECK(run.text.find("did not stop within 1 s (an actor still runs; threads:") != std::string::npos);
  CHECK(run.text.find("hook ran\nsecond hook ran\n") != std::string::npos);
}

// Every actor ended, and only the system's own teardown hangs (CAF 0.17 now
// and then misses a detached thread's shutdown; here a hidden detached
// actor, which no actor count includes, stands for it): destroy_bounded
// warns and returns after its bound, and the program goes on.
TEST_CASE("destroy_bounded returns after its bound when only the system's own teardown hangs") {
  auto run = in_child([] {
    system_fixture f;
    f.sys->spawn<caf::hidden>([](caf::blocking_actor*) { std::this_thread::sleep_for(30s); });
    hvactor::destroy_bounded(f.sys, 1s);
    std::fprintf(stderr, "went on\n");
    std::fflush(stderr);
    std::_Exit(f.sys == nullptr ? 7 : 8);
  });
  INFO(run.text);
  CHECK(WIFEXITED(run.status));
  CHECK(WEXITSTATUS(run.status) == 7);
  CHECK(run.took >= 1s);
  CHECK(run.took < 5s);
  CHECK(run.text.find("own teardown did not finish within 1 s after every actor ended")
        != std::string::npos);
  CHECK(run.text.find("went on") != std::string::npos);
}
