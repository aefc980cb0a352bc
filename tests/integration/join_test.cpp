// hvd::join() between real worker processes (2, 3 and 4 ranks, over shared
// memory and over Gloo), as Horovod's test_horovod_join_allreduce,
// _allgather and _broadcast check it: ranks with uneven numbers of steps
// finish without hanging, the joined ranks take part with zeros (an
// average still divides by the full size), an allgather or a broadcast
// while a rank has joined fails on the others, join() returns the last rank
// to join on every rank, a rank that dies while the others wait in join()
// fails them, and a rank busy outside hvd calls while the others wait in
// join() is a stall: warned about and, past the shutdown time, a failure on
// every rank, naming it.

#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>
#include <hvactor/hvactor.hpp>

#include "child_process.hpp"
#include "hvd_session.hpp"
#include "peer_death.hpp"
#include "join_workloads.hpp"
#include "test_main.hpp"

using namespace std::chrono_literals;

namespace hvd = hvactor::hvd;
using hvactor::test::join_allreduce;
using hvactor::test::other_kind_while_joined;
using hvactor::test::uneven_steps;

namespace {

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

/// Rank 1 SIGKILLs itself 300 ms in; the others wait in join()
/// (peer_death.hpp's reports).
std::string join_then_peer_dies(std::string dir) {
  hvactor::test::hvd_session s;
  if (hvd::rank() == 1) {
    std::this_thread::sleep_for(300ms);
    hvactor::test::die_now(dir);
  }
  std::string outcome = "no error";
  try {
    hvd::join();
  } catch (const hvactor::error& e) {
    outcome = e.what();
  }
  hvactor::test::report_failure(dir, hvd::rank(), outcome);
  return outcome;
}

/// Rank 2 of 3 is busy outside hvd calls while ranks 0 and 1 wait in
/// join(). Each of those returns "<ms join() took>|<error>" and writes
/// <dir>/failed-<rank>; rank 2 waits for both files, then calls join() and
/// returns its error.
std::string join_while_peer_busy(std::string dir) {
  hvactor::test::hvd_session s;
  auto path = [&](int r) { return std::filesystem::path(dir) / ("failed-" + std::to_string(r)); };
  if (hvd::rank() == 2) {
    hvactor::test::wait_until(
      [&] { return std::filesystem::exists(path(0)) && std::filesystem::exists(path(1)); }, 20s);
    try {
      hvd::join();
    } catch (const hvactor::error& e) {
      return e.what();
    }
    return "no error";
  }
  auto t0 = std::chrono::steady_clock::now();
  std::string outcome = "no error";
  try {
    hvd::join();
  } catch (const hvactor::error& e) {
    outcome = e.what();
  }
  auto ms =
    std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
  std::ofstream{path(hvd::rank())} << "done";
  return std::to_string(ms.count()) + "|" + outcome;
}

hvactor::executor make(int n, const char* shm, std::chrono::milliseconds timeout = 20s,
                       std::map<std::string, std::string> env = {}) {
  env["HVACTOR_SHM"] = shm;
  return hvactor::executor{test_runtime(), hvactor::executor::create_settings({.timeout = timeout}),
                           {.num_workers = n, .extra_env_vars = env}};
}

} // namespace

TEST_SUITE("hvd::join") {

TEST_CASE("Horovod's join allreduce: the joined rank adds zeros, the average divides by the "
          "full size, and join() returns the same rank, not the first to join, everywhere") {
  for (const char* shm : {"1", "0"})
    for (int n : {2, 3}) {
      CAPTURE(shm);
      CAPTURE(n);
      auto ex = make(n, shm);
      ex.start();
      for (int first : {0, 1}) {
        CAPTURE(first);
        auto got = ex.run(&join_allreduce, first);
        for (auto& g : got) {
          CAPTURE(g);
          CHECK(g == got[0]);
          CHECK(g != std::to_string(first));
          CHECK(g.find(' ') == std::string::npos); // no problems listed
        }
      }
      ex.shutdown();
    }
}

TEST_CASE("ranks with 10, 11, 12 and 13 steps finish without hanging, with Horovod's results, "
          "join() returns the last rank to join, and the ranks pair again afterwards") {
  struct variant {
    const char* shm;
    int n;
  };
  for (auto v : {variant{"1", 4}, variant{"0", 4}, variant{"1", 2}, variant{"0", 3}}) {
    CAPTURE(v.shm);
    CAPTURE(v.n);
    auto ex = make(v.n, v.shm);
    ex.start();
    auto t0 = std::chrono::steady_clock::now();
    auto got = ex.run(&uneven_steps, 10);
    CHECK(std::chrono::steady_clock::now() - t0 < 30s);
    for (auto& g : got)
      CHECK(g == std::to_string(v.n - 1));
    ex.shutdown();
  }
}

TEST_CASE("while a rank has joined, an allgather and a broadcast from the joined root fail on the "
          "others with Horovod's message; a barrier runs; the join still ends") {
  for (const char* shm : {"1", "0"}) {
    CAPTURE(shm);
    auto ex = make(3, shm);
    ex.start();
    auto gathered = ex.run(&other_kind_while_joined, 0, std::string{"allgather"});
    for (size_t r = 1; r < gathered.size(); ++r) {
      CAPTURE(gathered[r]);
      CHECK(contains(gathered[r], "Allgather is not supported with Join at this time"));
      CHECK(contains(gathered[r], "rank 0 called hvd::join()"));
      CHECK(contains(gathered[r], "failed on rank " + std::to_string(r)));
    }
    auto broadcast = ex.run(&other_kind_while_joined, 1, std::string{"broadcast"});
    for (size_t r : {size_t{0}, size_t{2}}) {
      CAPTURE(broadcast[r]);
      CHECK(contains(broadcast[r], "Broadcast is not supported with Join at this time"));
      CHECK(contains(broadcast[r], "root 1"));
    }
    CHECK(broadcast[1] == broadcast[0].substr(broadcast[0].find('|')));
    auto barrier = ex.run(&other_kind_while_joined, 2, std::string{"barrier"});
    // No error; whichever of ranks 0 and 1 joined last (or 1, when both
    // joined in one round), the same everywhere.
    CHECK(barrier == std::vector<std::string>(3, barrier[0]));
    CHECK((barrier[0] == "|0" || barrier[0] == "|1"));
    ex.shutdown();
  }
}

TEST_CASE("a rank SIGKILLed while the others wait in join() fails them within 2 s") {
  for (const char* shm : {"1", "0"}) {
    CAPTURE(shm);
    hvactor::test::temp_dir dir;
    auto ex = make(3, shm, 5s);
    ex.start();
    CHECK_THROWS_AS(ex.run(&join_then_peer_dies, dir.path().string()), hvactor::worker_error);
    hvactor::test::check_survivors_failed(dir.path(), {0, 2}, 2s);
    ex.shutdown();
  }
}

TEST_CASE("ranks waiting in join() for a rank busy outside hvd calls warn naming it, and past "
          "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS every rank fails naming it") {
  for (const char* shm : {"1", "0"}) {
    CAPTURE(shm);
    hvactor::test::temp_dir dir;
    auto ex = make(3, shm, 4s,
                   {{"HOROVOD_STALL_CHECK_TIME_SECONDS", "1"},
                    {"HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "3"}});
    std::mutex mu;
    std::vector<std::map<std::string, std::string>> events;
    ex.on_event([&](int, const std::map<std::string, std::string>& f) {
      std::lock_guard<std::mutex> lk{mu};
      if (f.count("event") && f.at("event") == "stall")
        events.push_back(f);
    });
    ex.start();
    auto got = ex.run(&join_while_peer_busy, dir.path().string());
    REQUIRE(got.size() == 3);
    const std::string missing = "hvd::join() (ranks that have not joined: 2)";
    for (int r : {0, 1}) {
      CAPTURE(r);
      auto& mine = got[static_cast<size_t>(r)];
      CAPTURE(mine);
      auto bar = mine.find('|');
      REQUIRE(bar != std::string::npos);
      auto ms = std::stol(mine.substr(0, bar));
      CHECK(ms >= 2900);
      CHECK(ms < 6500);
      CHECK(contains(mine, "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=3"));
      CHECK(contains(mine, missing));
    }
    CAPTURE(got[2]);
    CHECK(contains(got[2], "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=3"));
    CHECK(contains(got[2], missing));
    std::lock_guard<std::mutex> lk{mu};
    std::vector<bool> warned(3, false);
    for (auto& e : events) {
      CAPTURE(e.at("message"));
      CHECK(contains(e.at("message"), missing));
      warned.at(static_cast<size_t>(std::stoi(e.at("rank")))) = true;
    }
    CHECK(warned == std::vector<bool>{true, true, false});
    ex.shutdown();
  }
}

} // TEST_SUITE
