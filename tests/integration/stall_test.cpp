// The stall inspector between real worker processes: a rank busy outside
// hvd calls (evaluation, a checkpoint) while another waits in a
// collective. With HOROVOD_STALL_CHECK_TIME_SECONDS=1 and
// HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=3, the waiting rank warns naming the
// busy rank from its first warning on, and both ranks fail naming it, over
// shared memory and Gloo, unnamed (paired by call order) and named (agreed
// by the response cache, or with the cache off), in a process set (the
// job's rank numbers, not the set's). The hierarchical path: the same
// workload (stall_workloads.hpp) in hierarchical_test.

#include <chrono>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <doctest/doctest.h>
#include <hvactor/hvactor.hpp>

#include "child_process.hpp"
#include "stall_workloads.hpp"
#include "test_main.hpp"
#include "test_support.hpp"

using namespace std::chrono_literals;

namespace hvd = hvactor::hvd;

namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

struct variant {
  const char* what;
  std::map<std::string, std::string> env;
  std::vector<const char*> kinds;
  bool in_set = false;
};

void check_busy_peer_named(const variant& v) {
  CAPTURE(v.what);
  int n = v.in_set ? 3 : 2, busy = v.in_set ? 1 : 0, waiting = busy + 1;
  auto env = v.env;
  env["HOROVOD_STALL_CHECK_TIME_SECONDS"] = "1";
  env["HOROVOD_STALL_SHUTDOWN_TIME_SECONDS"] = "3";
  hvactor::executor ex{test_runtime(), hvactor::executor::create_settings({.timeout = 4s}),
                       {.num_workers = n, .extra_env_vars = env}};
  std::mutex mu;
  std::vector<std::map<std::string, std::string>> events;
  ex.on_event([&](int, const std::map<std::string, std::string>& f) {
    std::lock_guard<std::mutex> lk{mu};
    if (f.count("event") && f.at("event") == "stall")
      events.push_back(f);
  });
  ex.start();
  auto missing = "(ranks that have not submitted it: " + std::to_string(busy) + ")";
  for (const char* kind : v.kinds) {
    CAPTURE(kind);
    hvactor::test::temp_dir dir;
    {
      std::lock_guard<std::mutex> lk{mu};
      events.clear();
    }
    auto got = ex.run(&hvactor::test::busy_peer, dir.path().string(), std::string{kind}, v.in_set);
    REQUIRE(got.size() == static_cast<size_t>(n));
    auto& mine = got[static_cast<size_t>(waiting)];
    CAPTURE(mine);
    auto bar = mine.find('|');
    REQUIRE(bar != std::string::npos);
    auto ms = std::stol(mine.substr(0, bar));
    auto error = mine.substr(bar + 1);
    // Fails once it waited the shutdown time, within two heartbeats of it.
    CHECK(ms >= 2900);
    CHECK(ms < 6500);
    CHECK(contains(error, "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=3"));
    CHECK(contains(error, missing));
    auto& other = got[static_cast<size_t>(busy)];
    CAPTURE(other);
    CHECK(contains(other, "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=3"));
    CHECK(contains(other, missing));
    std::lock_guard<std::mutex> lk{mu};
    int warnings = 0;
    for (auto& e : events) {
      CAPTURE(e.at("message"));
      CHECK(e.at("rank") == std::to_string(waiting));
      CHECK(contains(e.at("message"), missing));
      CHECK(e.at("waiting").ends_with(":" + std::to_string(busy)));
      ++warnings;
    }
    CHECK(warnings >= 1);
  }
  ex.shutdown();
}

} // namespace

TEST_SUITE("stall inspector") {

TEST_CASE("a rank busy outside hvd calls is named by every stall warning and by the failure on "
          "both ranks, over shared memory with the response cache on and off, and over Gloo") {
  for (auto& v : {variant{"shared memory, cache on", {{"HVACTOR_SHM", "1"}}, {"unnamed", "named"}},
                  variant{"shared memory, cache off",
                          {{"HVACTOR_SHM", "1"}, {"HOROVOD_CACHE_CAPACITY", "0"}},
                          {"unnamed", "named"}},
                  variant{"Gloo", {{"HVACTOR_SHM", "0"}}, {"unnamed", "named"}}})
    check_busy_peer_named(v);
}

TEST_CASE("in a process set, the stall names the busy member by its rank in the job") {
  check_busy_peer_named(variant{"process set {1, 2}", {{"HVACTOR_SHM", "1"}}, {"unnamed"}, true});
}

} // TEST_SUITE
