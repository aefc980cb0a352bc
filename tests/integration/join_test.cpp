// hvd::join() between real worker processes (2, 3 and 4 ranks, over shared
// memory and over Gloo), as Horovod's test_horovod_join_allreduce,
// _allgather and _broadcast check it: ranks with uneven numbers of steps
// finish without hanging, the joined ranks take part with zeros (an
// average still divides by the full size), an allgather or a broadcast
// while a rank has joined fails on the others, join() returns the last rank
// to join on every rank, and a rank that dies while the others wait in
// join() fails them.

#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
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

hvactor::executor make(int n, const char* shm, std::chrono::milliseconds timeout = 20s) {
  return hvactor::executor{test_runtime(), hvactor::executor::create_settings({.timeout = timeout}),
                           {.num_workers = n, .extra_env_vars = {{"HVACTOR_SHM", shm}}}};
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

} // TEST_SUITE
