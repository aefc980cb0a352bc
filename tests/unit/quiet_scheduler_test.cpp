// hvactor's CAF scheduler (base/internal/quiet_scheduler.hpp) in real actor
// systems: its idle threads never wake (CAF's work stealing wakes each one
// every relaxed-sleep-duration), and work still moves between threads: a
// message from outside reaches an actor while another thread is busy, jobs
// queued behind a busy handler are stolen, and a flood of messages among
// many actors all arrive.

#include "base/internal/actor_system.hpp"
#include "base/internal/quiet_scheduler.hpp"

#include <dirent.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/stateful_actor.hpp>
#include <doctest/doctest.h>

using namespace std::chrono_literals;

namespace {

/// This process's thread ids now.
std::set<int> thread_ids() {
  std::set<int> out;
  DIR* dir = ::opendir("/proc/self/task");
  REQUIRE(dir != nullptr);
  while (auto* e = ::readdir(dir))
    if (e->d_name[0] != '.')
      out.insert(std::stoi(e->d_name));
  ::closedir(dir);
  return out;
}

/// Voluntary context switches (wake-ups after a sleep) of each of `tids`
/// so far, by "name (tid)".
std::map<std::string, long> wakeups_by_thread(const std::set<int>& tids) {
  std::map<std::string, long> out;
  for (int tid : tids) {
    auto dir = "/proc/self/task/" + std::to_string(tid);
    std::ifstream status{dir + "/status"};
    std::string name, line;
    std::getline(std::ifstream{dir + "/comm"}, name);
    while (std::getline(status, line))
      if (line.rfind("voluntary_ctxt_switches:", 0) == 0)
        out[name + " (" + std::to_string(tid) + ")"] = std::stol(line.substr(line.find(':') + 1));
  }
  return out;
}

/// Wake-ups of `tids` between `before` (wakeups_by_thread) and now, with
/// each thread's count in `detail`.
long woke_since(const std::set<int>& tids, const std::map<std::string, long>& before,
                std::string& detail) {
  long sum = 0;
  for (auto& [thread, count] : wakeups_by_thread(tids)) {
    auto it = before.find(thread);
    auto n = count - (it == before.end() ? 0 : it->second);
    sum += n;
    detail += " " + thread + ": " + std::to_string(n) + ";";
  }
  return sum;
}

/// An actor system on hvactor's settings with `threads` scheduler threads,
/// and the threads it started.
struct quiet_system {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  std::set<int> threads;

  explicit quiet_system(size_t threads_wanted) {
    hvactor::configure_actor_system(cfg, threads_wanted, {});
    auto before = thread_ids();
    sys = std::make_unique<caf::actor_system>(cfg);
    std::this_thread::sleep_for(100ms); // every thread started
    for (int tid : thread_ids())
      if (before.count(tid) == 0)
        threads.insert(tid);
  }
};

/// Answers every int with itself.
caf::behavior echo(caf::event_based_actor*) {
  return {[](int x) { return x; }};
}

/// Sends `a` and `b` a message each, then blocks its thread for the given
/// milliseconds (a busy thread; real handlers never block).
caf::behavior blocker(caf::event_based_actor* self, caf::actor a, caf::actor b) {
  return {[=](int ms) {
    // Two jobs queued on this thread, then the thread is busy.
    self->send(a, 1);
    self->send(b, 2);
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  }};
}

caf::behavior counter(caf::event_based_actor*, std::shared_ptr<std::atomic<int>> seen) {
  return {[=](int) { ++*seen; }};
}

struct pinger_state {
  caf::actor partner;
};

/// Passes a count back and forth with its partner; at 0, tells the sink.
caf::behavior pinger(caf::stateful_actor<pinger_state>* self, caf::actor sink) {
  return {
    [=](caf::actor partner) { self->state.partner = std::move(partner); },
    [=](int x) {
      if (x == 0)
        self->send(sink, 0);
      else
        self->send(self->state.partner, x - 1);
    },
  };
}

} // namespace

TEST_SUITE("quiet scheduler") {

TEST_CASE("an idle actor system's threads do not wake") {
  quiet_system s{4};
  // A burst of work first: the threads have run and gone back to sleep.
  // (No request: CAF 0.17 leaves a blocking request's timeout on the
  // clock, which then wakes when it expires.)
  auto seen = std::make_shared<std::atomic<int>>(0);
  auto a = s.sys->spawn(counter, seen);
  for (int i = 0; i < 1000; ++i)
    caf::anon_send(a, i);
  for (int i = 0; i < 400 && seen->load() < 1000; ++i)
    std::this_thread::sleep_for(5ms);
  REQUIRE(seen->load() == 1000);
  std::this_thread::sleep_for(200ms);
  auto before = wakeups_by_thread(s.threads);
  std::this_thread::sleep_for(2s);
  std::string detail;
  auto woke = woke_since(s.threads, before, detail);
  MESSAGE("wake-ups of the system's " << s.threads.size() << " threads in 2 s: " << woke << " ("
                                      << detail << " )");
  CHECK(woke <= 1); // CAF's work stealing: each scheduler thread every relaxed sleep (8 at 1 s)
  caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
}

TEST_CASE("a message from outside reaches an actor while another thread is busy") {
  quiet_system s{2};
  auto seen = std::make_shared<std::atomic<int>>(0);
  auto busy = s.sys->spawn(blocker, s.sys->spawn(counter, seen), s.sys->spawn(counter, seen));
  caf::anon_send(busy, 1500);
  std::this_thread::sleep_for(100ms); // the blocker holds one of the two threads
  auto other = s.sys->spawn(echo);
  caf::scoped_actor self{*s.sys};
  auto t0 = std::chrono::steady_clock::now();
  bool answered = false;
  self->request(other, 2s, 7).receive([&](int x) { answered = x == 7; },
                                       [](caf::error&) {});
  auto took = std::chrono::steady_clock::now() - t0;
  CHECK(answered);
  CHECK(took < 500ms); // not behind the blocked handler
}

TEST_CASE("jobs queued behind a busy handler are stolen by an idle thread") {
  quiet_system s{2};
  auto seen = std::make_shared<std::atomic<int>>(0);
  auto a = s.sys->spawn(counter, seen);
  auto b = s.sys->spawn(counter, seen);
  auto busy = s.sys->spawn(blocker, a, b);
  auto t0 = std::chrono::steady_clock::now();
  caf::anon_send(busy, 2000);
  while (seen->load() < 2 && std::chrono::steady_clock::now() - t0 < 3s)
    std::this_thread::sleep_for(5ms);
  auto took = std::chrono::steady_clock::now() - t0;
  CHECK(seen->load() == 2);
  CHECK(took < 1s); // not after the 2 s handler
}

TEST_CASE("a flood of messages among many actors all arrive") {
  quiet_system s{3};
  auto seen = std::make_shared<std::atomic<int>>(0);
  auto sink = s.sys->spawn(counter, seen);
  constexpr int pairs = 16, hops = 2000;
  std::vector<std::pair<caf::actor, caf::actor>> all;
  for (int p = 0; p < pairs; ++p) {
    all.emplace_back(s.sys->spawn(pinger, sink), s.sys->spawn(pinger, sink));
    caf::anon_send(all.back().first, all.back().second);
    caf::anon_send(all.back().second, all.back().first);
  }
  for (auto& [a, b] : all)
    caf::anon_send(a, hops);
  auto t0 = std::chrono::steady_clock::now();
  while (seen->load() < pairs && std::chrono::steady_clock::now() - t0 < 20s)
    std::this_thread::sleep_for(5ms);
  MESSAGE((pairs * hops) << " messages among " << 2 * pairs << " actors in "
                       << std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::steady_clock::now() - t0)
                            .count()
                       << " ms");
  CHECK(seen->load() == pairs);
  for (auto& [a, b] : all) { // each holds the other: they never end by themselves
    caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(b, caf::exit_reason::user_shutdown);
  }
}

} // TEST_SUITE
