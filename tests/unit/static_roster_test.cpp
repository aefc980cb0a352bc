// static_roster: a static job's rules about its ranks (registration, the
// registration deadline's missing ranks, lost nodes, dead workers'
// errors, hvactor-run's end), as the coordinator applies them.

#include <doctest/doctest.h>

#include <random>
#include <set>
#include <string>
#include <vector>

#include "actors/protocol/interfaces.hpp"
#include "actors/coordinator/static_roster.hpp"

using hvactor::detail::static_roster;
using registration = static_roster::registration;
using launch_next = static_roster::launch_next;

TEST_SUITE("static roster") {

TEST_CASE("registration: each rank once, complete with the last; strangers are unexpected") {
  static_roster r;
  r.plan({"n1", "n1", "n2"});
  CHECK(r.size() == 3);
  CHECK(r.registered(1, "n1", 11) == registration::accepted);
  CHECK(r.registered(1, "n1", 11) == registration::unexpected);
  CHECK(r.registered(3, "n2", 13) == registration::unexpected);
  CHECK(r.registered(-1, "n2", 13) == registration::unexpected);
  CHECK_FALSE(r.complete());
  CHECK(r.missing() == std::vector<std::string>{"rank 0 on node 'n1'", "rank 2 on node 'n2'"});
  CHECK(r.registered(0, "n1", 10) == registration::accepted);
  CHECK(r.registered(2, "n2", 12) == registration::complete);
  CHECK(r.complete());
  CHECK(r.missing().empty());
}

TEST_CASE("labels name the registered node and pid, the planned node before") {
  static_roster r;
  r.plan({"n1", "n2"});
  CHECK(r.label(1) == "rank 1 on node 'n2'");
  r.registered(1, "n2", 4711);
  CHECK(r.label(1) == "rank 1 on node 'n2' (pid 4711)");
  CHECK_THROWS_AS(r.label(2), std::out_of_range);
}

TEST_CASE("a lost node names the ranks planned there") {
  static_roster r;
  r.plan({"n1", "n2", "n2"});
  r.registered(2, "n2", 42);
  CHECK(r.on_node("n2") == std::vector<std::string>{"rank 1", "rank 2 (pid 42)"});
  CHECK(r.on_node("n3").empty());
}

TEST_CASE("a dead worker's error: registered or not, with or without its stderr") {
  static_roster r;
  r.plan({"n1", "n2"});
  r.registered(0, "n1", 10);
  hvactor::proto::worker_exit ex;
  ex.world_rank = 0;
  ex.node_id = "n1";
  ex.pid = 10;
  ex.signal = 9;
  auto text = r.died(ex);
  CHECK(text.find("worker rank 0 on node 'n1' (pid 10) died: ") == 0);
  CHECK(text.find("It wrote nothing to stderr.") != std::string::npos);
  ex.world_rank = 1;
  ex.node_id = "n2";
  ex.pid = 20;
  ex.signal = 0;
  ex.exit_code = 3;
  ex.stderr_tail = {"boom", "bang"};
  text = r.died(ex);
  CHECK(text.find("worker rank 1 on node 'n2' (pid 20) died before registering: ") == 0);
  CHECK(text.find("Last stderr lines:\n  boom\n  bang") != std::string::npos);
}

TEST_CASE("hvactor-run: all ok ends it once; the first failure decides; repeats change nothing") {
  static_roster r;
  r.plan({"n1", "n1", "n2"});
  CHECK(r.exited(0, true) == launch_next::wait);
  CHECK(r.exited(0, true) == launch_next::wait);
  CHECK(r.exited(1, true) == launch_next::wait);
  CHECK(r.exited(2, true) == launch_next::all_ok);
  r.plan({"n1", "n1", "n2"});
  CHECK(r.exited(1, false) == launch_next::first_failure);
  CHECK(r.exited(0, true) == launch_next::wait);
  CHECK(r.exited(2, false) == launch_next::later_failure);
  CHECK(r.exited(7, false) == launch_next::later_failure);
}

TEST_CASE("property: over random exit orders, all_ok comes exactly when every rank exited "
          "with status 0, first_failure exactly once when any failed") {
  std::mt19937 rng(29);
  for (int round = 0; round < 500; ++round) {
    int n = 1 + static_cast<int>(rng() % 8);
    static_roster r;
    r.plan(std::vector<std::string>(n, "n"));
    std::vector<int> order;
    for (int i = 0; i < 2 * n; ++i)
      order.push_back(static_cast<int>(rng() % (n + 1)) - (i % 5 == 0 ? 1 : 0));
    int all_ok = 0, first = 0;
    bool any_failed = false;
    std::set<int> exited;
    for (int rank : order) {
      bool ok = rng() % 4 != 0;
      bool fresh = rank >= 0 && rank < n && exited.insert(rank).second;
      auto next = r.exited(rank, ok);
      if (fresh && !ok)
        any_failed = true;
      all_ok += next == launch_next::all_ok;
      first += next == launch_next::first_failure;
      if (next == launch_next::first_failure)
        CHECK(fresh);
    }
    CHECK(first == (any_failed ? 1 : 0));
    bool everyone = static_cast<int>(exited.size()) == n;
    CHECK(all_ok == (everyone && !any_failed ? 1 : 0));
  }
}

} // TEST_SUITE
