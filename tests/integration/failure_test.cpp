// Failures never hang: remote exceptions, dead workers (SIGKILL, segfault,
// nonzero exit) and a dead driver, each with real processes.

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <atomic>
#include <map>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>
#include <hvactor/hvactor.hpp>

#include "test_main.hpp"
#include "test_support.hpp"

using namespace std::chrono_literals;

namespace {

int env_int(const char* name) {
  const char* value = std::getenv(name);
  return value ? std::atoi(value) : -1;
}

int throw_on_rank(int bad_rank) {
  if (env_int("HOROVOD_RANK") == bad_rank)
    throw std::runtime_error("bad batch 17 on this rank");
  return 1;
}

/// Writes a marker to stderr, then dies the way `how` says on `rank`;
/// the other ranks return at once.
int die_on_rank(int rank, int how) {
  int me = env_int("HOROVOD_RANK");
  if (me != rank)
    return me;
  std::fprintf(stderr, "marker line one of rank %d\nmarker line two of rank %d\n", me, me);
  std::fflush(stderr);
  if (how == 0)
    ::raise(SIGKILL);
  if (how == 1)
    ::raise(SIGSEGV);
  ::_exit(3);
}

/// Rank `rank` dies; its peers notice shortly after and raise, as ranks
/// blocked in a collective with a dead peer do.
int die_while_peers_raise(int rank) {
  if (env_int("HOROVOD_RANK") == rank) {
    std::fprintf(stderr, "rank %d goes down\n", rank);
    std::fflush(stderr);
    ::raise(SIGKILL);
  }
  ::usleep(1000);
  throw std::runtime_error("collective failed: peer closed the connection");
}

int marker_then_sleep(int seconds) {
  std::fprintf(stderr, "sleeping rank %d\n", env_int("HOROVOD_RANK"));
  std::fflush(stderr);
  ::sleep(static_cast<unsigned>(seconds));
  return env_int("HOROVOD_RANK");
}

int rank_of() {
  return env_int("HOROVOD_RANK");
}

int event_then_sleep(int ms) {
  hvactor::log::event({{"step", "1"}});
  ::usleep(static_cast<useconds_t>(ms) * 1000);
  return env_int("HOROVOD_RANK");
}

int sleep_on_rank(int rank, int ms) {
  if (env_int("HOROVOD_RANK") == rank)
    ::usleep(static_cast<useconds_t>(ms) * 1000);
  return env_int("HOROVOD_RANK");
}

hvactor::settings quick_settings() {
  return hvactor::executor::create_settings({.timeout = 20s, .placement_timeout = 20s});
}

std::vector<std::pair<std::string, hvactor::executor_options>> layouts() {
  return {{"num_workers=4", {.num_workers = 4}},
          {"num_hosts=1 x num_workers_per_host=4", {.num_hosts = 1, .num_workers_per_host = 4}}};
}

} // namespace

TEST_SUITE("executor failures") {

TEST_CASE("an exception thrown by a remote function becomes worker_error naming rank, node, pid "
          "and its text") {
  for (auto& [name, opts] : layouts()) {
    CAPTURE(name);
    hvactor::executor ex{test_runtime(), quick_settings(), opts};
    ex.start();
    auto pids = ex.worker_pids();
    try {
      ex.run(&throw_on_rank, 2);
      FAIL("run() returned although rank 2 threw");
    } catch (const hvactor::worker_error& e) {
      std::string what = e.what();
      CAPTURE(what);
      CHECK(e.rank() == 2);
      CHECK(what.find("rank 2") != std::string::npos);
      CHECK(what.find("'test-node'") != std::string::npos);
      CHECK(what.find("pid " + std::to_string(pids[2])) != std::string::npos);
      CHECK(what.find("bad batch 17 on this rank") != std::string::npos);
    }
    // The workers survive a remote exception, as Ray actors do.
    CHECK(ex.run(&rank_of) == std::vector<int>{0, 1, 2, 3});
    ex.shutdown();
    CHECK(hvactor::test::all_gone(pids, 1s));
  }
}

TEST_CASE("a worker process that dies becomes worker_error within 2 s naming rank, node, pid, "
          "exit status and its last stderr lines") {
  struct death {
    int how;
    int rank;
    const char* status;
  };
  for (auto [how, rank, status] : {death{0, 1, "signal 9 (SIGKILL)"},
                                   death{1, 3, "signal 11 (SIGSEGV)"},
                                   death{2, 0, "exit code 3"}}) {
    for (auto& [name, opts] : layouts()) {
      CAPTURE(name);
      CAPTURE(status);
      hvactor::executor ex{test_runtime(), quick_settings(), opts};
      ex.start();
      auto pids = ex.worker_pids();
      auto t0 = std::chrono::steady_clock::now();
      std::string what;
      int failed_rank = -1;
      try {
        ex.run(&die_on_rank, rank, how);
      } catch (const hvactor::worker_error& e) {
        what = e.what();
        failed_rank = e.rank();
      }
      auto elapsed = std::chrono::steady_clock::now() - t0;
      CAPTURE(what);
      CHECK(elapsed < 2s);
      CHECK(failed_rank == rank);
      CHECK(what.find("rank " + std::to_string(rank)) != std::string::npos);
      CHECK(what.find("'test-node'") != std::string::npos);
      CHECK(what.find("pid " + std::to_string(pids[rank])) != std::string::npos);
      CHECK(what.find(status) != std::string::npos);
      CHECK(what.find("marker line one of rank " + std::to_string(rank)) != std::string::npos);
      CHECK(what.find("marker line two of rank " + std::to_string(rank)) != std::string::npos);
      // The job is failed: later calls report the same failure.
      CHECK_THROWS_AS(ex.run(&rank_of), hvactor::worker_error);
      ex.shutdown();
      CHECK(hvactor::test::all_gone(pids, 1s));
    }
  }
}

TEST_CASE("when a rank dies and its peers raise right after, the error names the dead rank") {
  hvactor::executor ex{test_runtime(), quick_settings(), {.num_workers = 4}};
  ex.start();
  auto pids = ex.worker_pids();
  std::string what;
  int failed_rank = -1;
  try {
    ex.run(&die_while_peers_raise, 3);
  } catch (const hvactor::worker_error& e) {
    what = e.what();
    failed_rank = e.rank();
  }
  CAPTURE(what);
  CHECK(failed_rank == 3);
  CHECK(what.find("SIGKILL") != std::string::npos);
  CHECK(what.find("rank 3 goes down") != std::string::npos);
  ex.shutdown();
  CHECK(hvactor::test::all_gone(pids, 1s));
}

TEST_CASE("SIGKILL of a worker in the middle of a long call fails the call within 2 s") {
  hvactor::executor ex{test_runtime(), quick_settings(), {.num_workers = 4}};
  ex.start();
  auto pids = ex.worker_pids();
  auto futures = ex.run_remote(&marker_then_sleep, 30);
  std::this_thread::sleep_for(300ms);
  auto t0 = std::chrono::steady_clock::now();
  ::kill(pids[2], SIGKILL);
  std::string what;
  try {
    futures[0].get();
  } catch (const hvactor::worker_error& e) {
    what = e.what();
  }
  CAPTURE(what);
  CHECK(std::chrono::steady_clock::now() - t0 < 2s);
  CHECK(what.find("rank 2") != std::string::npos);
  CHECK(what.find("SIGKILL") != std::string::npos);
  CHECK(what.find("sleeping rank 2") != std::string::npos);
  for (auto& f : futures)
    CHECK_THROWS_AS(f.get(), hvactor::worker_error);
  // Shutdown stops the sleepers (SIGTERM) without waiting for their calls.
  auto t1 = std::chrono::steady_clock::now();
  ex.shutdown();
  CHECK(std::chrono::steady_clock::now() - t1 < 4s);
  CHECK(hvactor::test::all_gone(pids, 1s));
}

TEST_CASE("SIGKILL of a worker in the middle of a long synchronous run() fails it within 2 s "
          "naming the dead rank, although the other ranks are still busy") {
  hvactor::executor ex{test_runtime(), quick_settings(), {.num_workers = 4}};
  ex.start();
  auto pids = ex.worker_pids();
  std::thread killer{[&] {
    std::this_thread::sleep_for(300ms);
    ::kill(pids[2], SIGKILL);
  }};
  auto t0 = std::chrono::steady_clock::now();
  std::string what;
  try {
    ex.run(&marker_then_sleep, 30);
  } catch (const hvactor::worker_error& e) {
    what = e.what();
  }
  killer.join();
  CAPTURE(what);
  CHECK(std::chrono::steady_clock::now() - t0 < 2300ms);
  CHECK(what.find("rank 2") != std::string::npos);
  CHECK(what.find("SIGKILL") != std::string::npos);
  // The failed job stays failed, with the same error, at once.
  auto t1 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH_AS(ex.run(&rank_of), doctest::Contains("SIGKILL"), hvactor::worker_error);
  CHECK(std::chrono::steady_clock::now() - t1 < 500ms);
  ex.shutdown();
  CHECK(hvactor::test::all_gone(pids, 1s));
}

TEST_CASE("a rank that exceeds call_timeout fails run() with worker_error naming it and the "
          "timeout; its late answer is not mistaken for a later call's") {
  auto s = hvactor::executor::create_settings(
    {.timeout = 20s, .placement_timeout = 20s, .call_timeout = 400ms});
  hvactor::executor ex{test_runtime(), s, {.num_workers = 3}};
  ex.start();
  auto t0 = std::chrono::steady_clock::now();
  std::string what;
  try {
    ex.run(&sleep_on_rank, 1, 1500);
    FAIL("run() returned although rank 1 took 1.5 s with call_timeout 400 ms");
  } catch (const hvactor::worker_error& e) {
    what = e.what();
    CHECK(e.rank() == 1);
  }
  auto elapsed = std::chrono::steady_clock::now() - t0;
  CAPTURE(what);
  CHECK(elapsed >= 400ms);
  CHECK(elapsed < 1400ms);
  CHECK(what.find("rank 1 on node") != std::string::npos);
  CHECK(what.find("call_timeout (400 ms)") != std::string::npos);
  // Rank 1 is still asleep: the next call waits for it (within its own
  // call_timeout) and gets this call's answers, in rank order.
  std::this_thread::sleep_for(1200ms);
  CHECK(ex.run(&sleep_on_rank, 0, 0) == std::vector<int>{0, 1, 2});
  CHECK(ex.run(&rank_of) == std::vector<int>{0, 1, 2});
  // run_remote goes through the coordinator: the same message per rank.
  auto futures = ex.run_remote(&sleep_on_rank, 2, 1500);
  CHECK(futures[0].get() == 0);
  CHECK_THROWS_WITH_AS(futures[2].get(),
                       doctest::Contains("did not answer within call_timeout (400 ms)"),
                       hvactor::worker_error);
  ex.shutdown();
}

TEST_CASE("run() from several threads at once: every call gets its own answers") {
  hvactor::executor ex{test_runtime(), quick_settings(), {.num_workers = 2}};
  ex.start();
  std::atomic<int> wrong{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 4; ++t)
    callers.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i)
        if (ex.run(&sleep_on_rank, t % 2, i % 3) != std::vector<int>{0, 1})
          ++wrong;
    });
  for (auto& c : callers)
    c.join();
  CHECK(wrong == 0);
  ex.shutdown();
}

TEST_CASE("an on_event callback that throws fails the call in flight at once with its text") {
  hvactor::executor ex{test_runtime(), quick_settings(), {.num_workers = 2}};
  ex.on_event([](int, const std::map<std::string, std::string>&) {
    throw std::runtime_error("dashboard is down");
  });
  ex.start();
  auto t0 = std::chrono::steady_clock::now();
  std::string what;
  try {
    ex.run(&event_then_sleep, 5000);
  } catch (const hvactor::error& e) {
    what = e.what();
  }
  CAPTURE(what);
  CHECK(std::chrono::steady_clock::now() - t0 < 2s);
  CHECK(what.find("the on_event callback threw") != std::string::npos);
  CHECK(what.find("dashboard is down") != std::string::npos);
  auto pids = ex.worker_pids();
  ex.shutdown();
  CHECK(hvactor::test::all_gone(pids, 2s));
}

TEST_CASE("milliseconds::max() as every timeout means no bound: the job starts and calls work") {
  using ms = std::chrono::milliseconds;
  auto s = hvactor::executor::create_settings(
    {.timeout = ms::max(), .placement_timeout = ms::max(), .call_timeout = ms::max()});
  hvactor::executor ex{test_runtime(), s, {.num_workers = 2}};
  ex.start();
  CHECK(ex.run(&sleep_on_rank, 1, 300) == std::vector<int>{0, 1});
  auto futures = ex.run_remote(&sleep_on_rank, 0, 300);
  CHECK(futures[0].get() == 0);
  CHECK(futures[1].get() == 1);
  ex.shutdown();
}

TEST_CASE("negative timeouts and an overflowing worker count are refused before anything starts") {
  using ms = std::chrono::milliseconds;
  CHECK_THROWS_WITH_AS(
    hvactor::executor(test_runtime(), hvactor::executor::create_settings({.timeout = ms{-5}}),
                      {.num_workers = 1}),
    "timeout must be > 0 ms: Got -5 ms.", std::invalid_argument);
  auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH_AS(hvactor::executor(test_runtime(), quick_settings(),
                                         {.num_hosts = 65536, .num_workers_per_host = 65536}),
                       doctest::Contains("num_hosts * num_workers_per_host must be <="),
                       std::invalid_argument);
  CHECK(std::chrono::steady_clock::now() - t0 < 1s);
}

TEST_CASE("a driver killed with SIGKILL leaves no worker process alive after 5 s") {
  hvactor::test::program driver{{HVACTOR_VICTIM_DRIVER}};
  auto line = driver.read_line_with("PIDS", 30s);
  auto pids = hvactor::test::parse_ints(line);
  REQUIRE(pids.size() == 4);
  for (int pid : pids)
    CHECK(hvactor::test::pid_alive(pid));
  std::this_thread::sleep_for(200ms); // let the long call reach the workers
  driver.kill();
  CHECK(hvactor::test::all_gone(pids, 5s));
}

} // TEST_SUITE
