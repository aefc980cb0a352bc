#include "actors/node/node_ledger.hpp"

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <hvactor/errors.hpp>
#include "actors/protocol/system_config.hpp"

using hvactor::error_kind;
using hvactor::node_ledger;
using hvactor::proto::node_info;
using hvactor::proto::resources;

namespace {

/// The hvactor error kind a failed ledger call carries.
error_kind kind_of(const caf::error& err) {
  return static_cast<error_kind>(err.code());
}

/// A node with 8 CPUs and GPUs 0-3.
node_ledger four_gpu_node() {
  return node_ledger{"n1", 8, {0, 1, 2, 3}};
}

node_info info_of(const node_ledger& ledger) {
  node_info info;
  ledger.fill(info);
  return info;
}

/// Checks the invariants the ledger's contract promises after any calls.
void check_invariants(const node_ledger& ledger) {
  auto info = info_of(ledger);
  CHECK(info.free.cpus >= 0);
  CHECK(info.free.gpus >= 0);
  CHECK(info.free.cpus <= info.total.cpus);
  CHECK(info.free.gpus <= info.total.gpus);
  CHECK(static_cast<size_t>(info.free.gpus) == info.free_gpu_ids.size());
  for (auto id : info.free_gpu_ids)
    CHECK(std::count(info.gpu_ids.begin(), info.gpu_ids.end(), id) == 1);
}

} // namespace

TEST_SUITE("node_ledger") {

TEST_CASE("a new ledger reports everything free and no jobs") {
  auto info = info_of(four_gpu_node());
  CHECK(info.total.cpus == 8);
  CHECK(info.total.gpus == 4);
  CHECK(info.free.cpus == 8);
  CHECK(info.free.gpus == 4);
  CHECK(info.gpu_ids == std::vector<int32_t>{0, 1, 2, 3});
  CHECK(info.free_gpu_ids == std::vector<int32_t>{0, 1, 2, 3});
  CHECK(info.jobs.empty());
}

TEST_CASE("a GPU id listed twice is one GPU, and ids are kept ascending") {
  node_ledger ledger{"n1", 2, {3, 1, 1, 0, 3}};
  CHECK(ledger.gpu_ids() == std::vector<int32_t>{0, 1, 3});
  CHECK(ledger.total().gpus == 3);
  CHECK(ledger.free().gpus == 3);
}

TEST_CASE("a negative GPU id or CPU count is refused, naming the value") {
  try {
    node_ledger{"n1", 2, {0, -1}};
    FAIL("a GPU id of -1 was accepted");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string{e.what()}.find("GPU id -1 is out of range") != std::string::npos);
  }
  try {
    node_ledger{"n1", -3, {}};
    FAIL("-3 CPUs were accepted");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string{e.what()}.find("-3 CPUs") != std::string::npos);
  }
  CHECK_NOTHROW(node_ledger{"n1", 0, {}});
}

TEST_CASE("reserve hands out the lowest free GPU ids first") {
  auto ledger = four_gpu_node();
  auto a = ledger.reserve("a", {1, 1});
  auto b = ledger.reserve("b", {1, 2});
  REQUIRE(a);
  REQUIRE(b);
  CHECK(a->gpu_ids == std::vector<int32_t>{0});
  CHECK(b->gpu_ids == std::vector<int32_t>{1, 2});
  CHECK(ledger.release("a"));
  auto c = ledger.reserve("c", {1, 2});
  REQUIRE(c);
  CHECK(c->gpu_ids == std::vector<int32_t>{0, 3});
  CHECK(ledger.free_gpu_ids().empty());
}

TEST_CASE("a reservation names its job, node and amounts") {
  auto ledger = four_gpu_node();
  auto res = ledger.reserve("job-7", {3, 2});
  REQUIRE(res);
  CHECK(res->job_id == "job-7");
  CHECK(res->node_id == "n1");
  CHECK(res->res.cpus == 3);
  CHECK(res->res.gpus == 2);
  auto info = info_of(ledger);
  CHECK(info.free.cpus == 5);
  CHECK(info.free.gpus == 2);
  CHECK(info.free_gpu_ids == std::vector<int32_t>{2, 3});
  CHECK(info.jobs == std::vector<std::string>{"job-7"});
}

TEST_CASE("reserve is all or nothing: a request that does not fit takes nothing") {
  auto ledger = four_gpu_node();
  REQUIRE(ledger.reserve("a", {6, 1}));
  auto before = info_of(ledger);
  CHECK_FALSE(ledger.reserve("b", {2, 4})); // CPUs fit, GPUs do not
  CHECK_FALSE(ledger.reserve("c", {3, 0})); // GPUs fit, CPUs do not
  auto after = info_of(ledger);
  CHECK(after.free.cpus == before.free.cpus);
  CHECK(after.free.gpus == before.free.gpus);
  CHECK(after.free_gpu_ids == before.free_gpu_ids);
  CHECK(after.jobs == std::vector<std::string>{"a"});
}

TEST_CASE("over-asking is a placement_timeout naming the request and what is free") {
  auto ledger = four_gpu_node();
  REQUIRE(ledger.reserve("a", {4, 3}));
  auto res = ledger.reserve("b", {5, 2});
  REQUIRE_FALSE(res);
  CHECK(kind_of(res.error()) == error_kind::placement_timeout);
  CHECK(hvactor::describe(res.error())
        == "node 'n1' cannot reserve {CPU: 5, GPU: 2}: free {CPU: 4, GPU: 1}");
}

TEST_CASE("a second reservation for the same job is refused and the first one stays") {
  auto ledger = four_gpu_node();
  auto first = ledger.reserve("a", {1, 1});
  REQUIRE(first);
  auto second = ledger.reserve("a", {1, 1});
  REQUIRE_FALSE(second);
  CHECK(kind_of(second.error()) == error_kind::placement_timeout);
  CHECK(hvactor::describe(second.error()).find("already holds a reservation of job a")
        != std::string::npos);
  CHECK(ledger.free().cpus == 7);
  CHECK(ledger.claimable("a")->gpu_ids == first->gpu_ids);
}

TEST_CASE("negative amounts are an invalid_argument and reserve nothing") {
  auto ledger = four_gpu_node();
  auto res = ledger.reserve("a", {-1, 0});
  REQUIRE_FALSE(res);
  CHECK(kind_of(res.error()) == error_kind::invalid_argument);
  CHECK_FALSE(ledger.reserve("a", {0, -2}));
  CHECK(ledger.jobs().empty());
}

TEST_CASE("a reservation of nothing is held like any other") {
  auto ledger = four_gpu_node();
  auto res = ledger.reserve("a", {0, 0});
  REQUIRE(res);
  CHECK(res->gpu_ids.empty());
  CHECK(ledger.jobs() == std::vector<std::string>{"a"});
}

TEST_CASE("releasing an unknown job changes nothing and says so") {
  auto ledger = four_gpu_node();
  REQUIRE(ledger.reserve("a", {2, 2}));
  CHECK_FALSE(ledger.release("nobody"));
  CHECK(ledger.free().cpus == 6);
  CHECK(ledger.free_gpu_ids() == std::vector<int32_t>{2, 3});
}

TEST_CASE("release returns everything the job held, claimed or not") {
  auto ledger = four_gpu_node();
  REQUIRE(ledger.reserve("a", {3, 1}));
  REQUIRE(ledger.reserve("b", {5, 3}));
  ledger.claim("b");
  CHECK(ledger.release("a"));
  CHECK(ledger.release("b"));
  auto info = info_of(ledger);
  CHECK(info.free.cpus == 8);
  CHECK(info.free.gpus == 4);
  CHECK(info.free_gpu_ids == std::vector<int32_t>{0, 1, 2, 3});
  CHECK(info.jobs.empty());
  CHECK_FALSE(ledger.release("a"));
}

TEST_CASE("a colocator claims a reservation once; a claimed one is no longer claimable") {
  auto ledger = four_gpu_node();
  auto res = ledger.reserve("a", {2, 2});
  REQUIRE(res);
  auto claimable = ledger.claimable("a");
  REQUIRE(claimable);
  CHECK(claimable->gpu_ids == res->gpu_ids);
  ledger.claim("a");
  auto again = ledger.claimable("a");
  REQUIRE_FALSE(again);
  CHECK(kind_of(again.error()) == error_kind::placement_timeout);
  CHECK(hvactor::describe(again.error())
        == "node 'n1' holds no reservation for job a that is not already running");
  // Still held: claiming moves ownership, it frees nothing.
  CHECK(ledger.free().gpus == 2);
  CHECK(ledger.jobs() == std::vector<std::string>{"a"});
}

TEST_CASE("an unknown job is not claimable, and claiming it is a no-op") {
  auto ledger = four_gpu_node();
  CHECK_FALSE(ledger.claimable("x"));
  ledger.claim("x");
  CHECK(ledger.jobs().empty());
  REQUIRE(ledger.reserve("x", {1, 0}));
  CHECK(ledger.claimable("x"));
}

TEST_CASE("random reserve, claim and release sequences never go negative or past the totals") {
  std::mt19937 rng{20240611};
  for (int round = 0; round < 200; ++round) {
    std::uniform_int_distribution<int> cpus_of_node{0, 16};
    std::uniform_int_distribution<int> gpus_of_node{0, 8};
    std::vector<int32_t> ids;
    for (int g = gpus_of_node(rng); g > 0; --g)
      ids.push_back(static_cast<int32_t>(rng() % 12)); // duplicates on purpose
    node_ledger ledger{"n", cpus_of_node(rng), ids};
    // What the test believes each job holds.
    std::map<std::string, hvactor::proto::reservation> model;
    for (int step = 0; step < 60; ++step) {
      auto job = "j" + std::to_string(rng() % 6);
      switch (rng() % 3) {
        case 0: {
          resources want{static_cast<int32_t>(rng() % 7) - 1, static_cast<int32_t>(rng() % 5)};
          auto before = ledger.free();
          auto res = ledger.reserve(job, want);
          bool fits = want.cpus >= 0 && want.cpus <= before.cpus && want.gpus <= before.gpus
                      && !model.count(job);
          CHECK(static_cast<bool>(res) == fits);
          if (res) {
            CHECK(res->gpu_ids.size() == static_cast<size_t>(want.gpus));
            model[job] = *res;
          }
          break;
        }
        case 1:
          ledger.claim(job);
          break;
        default:
          CHECK(ledger.release(job) == (model.erase(job) > 0));
      }
      check_invariants(ledger);
      // The free resources are exactly the totals minus what the model holds,
      // and no GPU id is held twice.
      auto expect = ledger.total();
      std::set<int32_t> held;
      for (auto& [j, r] : model) {
        expect.cpus -= r.res.cpus;
        expect.gpus -= r.res.gpus;
        for (auto id : r.gpu_ids)
          CHECK(held.insert(id).second);
      }
      CHECK(ledger.free().cpus == expect.cpus);
      CHECK(ledger.free().gpus == expect.gpus);
      CHECK(ledger.jobs().size() == model.size());
    }
    for (auto& [j, r] : model)
      CHECK(ledger.release(j));
    CHECK(ledger.free().cpus == ledger.total().cpus);
    CHECK(ledger.free_gpu_ids() == ledger.gpu_ids());
  }
}

} // TEST_SUITE
