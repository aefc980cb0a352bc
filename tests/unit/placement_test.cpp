#include "actors/placement/placement.hpp"

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <doctest/doctest.h>

using hvactor::check_unique_nodes;
using hvactor::describe;
using hvactor::node_assignment;
using hvactor::node_resources;
using hvactor::placement_plan;
using hvactor::placement_request;
using hvactor::plan_placement;
using hvactor::workers_that_fit;

namespace {

/// A node with all its resources free.
node_resources idle(std::string id, int cpus, int gpus = 0) {
  return {std::move(id), cpus, gpus, cpus, gpus};
}

placement_request pack(int workers, int cpus = 1, int gpus = 0) {
  placement_request req;
  req.num_workers = workers;
  req.cpus_per_worker = cpus;
  req.gpus_per_worker = gpus;
  return req;
}

placement_request colocated(int hosts, int per_host, int cpus = 1, int gpus = 0) {
  placement_request req;
  req.num_hosts = hosts;
  req.workers_per_host = per_host;
  req.cpus_per_worker = cpus;
  req.gpus_per_worker = gpus;
  return req;
}

std::vector<std::string> node_ids(const placement_plan& plan) {
  std::vector<std::string> out;
  for (const auto& node : plan.nodes)
    out.push_back(node.node_id);
  return out;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

/// The invariants every returned plan must hold, whatever the request.
void check_plan(const placement_request& req, const std::vector<node_resources>& nodes,
                const placement_plan& plan) {
  std::map<std::string, const node_resources*> by_id;
  for (const auto& node : nodes)
    by_id[node.node_id] = &node;
  std::vector<int> times_placed(static_cast<std::size_t>(req.total_workers()), 0);
  std::set<std::string> used;
  int next_rank = 0;
  std::size_t last_index = 0;
  for (const auto& a : plan.nodes) {
    CAPTURE(a.node_id);
    REQUIRE(by_id.count(a.node_id) == 1);
    const auto& node = *by_id[a.node_id];
    CHECK(used.insert(a.node_id).second);
    CHECK_FALSE(a.ranks.empty());
    CHECK(a.cpus == req.cpus_per_worker * static_cast<int>(a.ranks.size()));
    CHECK(a.gpus == req.gpus_per_worker * static_cast<int>(a.ranks.size()));
    CHECK(a.cpus <= node.free_cpus);
    CHECK(a.gpus <= node.free_gpus);
    // Nodes keep the given order; ranks are contiguous in plan order.
    const auto index = static_cast<std::size_t>(&node - nodes.data());
    CHECK((&a == &plan.nodes.front() || index > last_index));
    last_index = index;
    for (int rank : a.ranks) {
      REQUIRE(rank >= 0);
      REQUIRE(rank < req.total_workers());
      ++times_placed[static_cast<std::size_t>(rank)];
      CHECK(rank == next_rank++);
    }
    if (req.colocated())
      CHECK(static_cast<int>(a.ranks.size()) == req.workers_per_host);
  }
  for (int count : times_placed)
    CHECK(count == 1);
  if (req.colocated())
    CHECK(static_cast<int>(plan.nodes.size()) == req.num_hosts);
  CHECK_NOTHROW(check_unique_nodes(plan));
}

} // namespace

TEST_SUITE("placement") {

TEST_CASE("a request is colocated exactly when workers_per_host is set") {
  CHECK_FALSE(pack(4).colocated());
  CHECK(pack(4).total_workers() == 4);
  CHECK(colocated(2, 3).colocated());
  CHECK(colocated(2, 3).total_workers() == 6);
}

TEST_CASE("a node fits as many workers as its scarcest free resource allows") {
  CHECK(workers_that_fit(idle("a", 8), 1, 0) == 8);
  CHECK(workers_that_fit(idle("a", 8), 3, 0) == 2);
  CHECK(workers_that_fit(idle("a", 8), 9, 0) == 0);
  CHECK(workers_that_fit(idle("a", 8, 2), 1, 1) == 2);
  CHECK(workers_that_fit(idle("a", 8, 5), 2, 2) == 2);
  CHECK(workers_that_fit(idle("a", 8, 0), 1, 1) == 0);
  // The GPU term is ignored when workers need no GPU.
  CHECK(workers_that_fit(idle("a", 4, 0), 1, 0) == 4);
  // Free, not total, resources count; negative free counts fit nothing.
  CHECK(workers_that_fit({"a", 8, 4, 3, 4}, 1, 1) == 3);
  CHECK(workers_that_fit({"a", 8, 4, -2, 4}, 1, 0) == 0);
  CHECK(workers_that_fit({"a", 8, 4, 8, -1}, 1, 1) == 0);
  CHECK_THROWS_AS(workers_that_fit(idle("a", 8), 0, 0), std::invalid_argument);
  CHECK_THROWS_AS(workers_that_fit(idle("a", 8), 1, -1), std::invalid_argument);
}

TEST_CASE("PACK fills 5 workers over three 2-CPU nodes as 2, 2, 1") {
  const std::vector<node_resources> nodes = {idle("a", 2), idle("b", 2), idle("c", 2)};
  const auto plan = plan_placement(pack(5), nodes);
  REQUIRE(plan);
  check_plan(pack(5), nodes, *plan);
  REQUIRE(plan->nodes.size() == 3);
  CHECK(node_ids(*plan) == std::vector<std::string>{"a", "b", "c"});
  CHECK(plan->nodes[0].ranks == std::vector<int>{0, 1});
  CHECK(plan->nodes[1].ranks == std::vector<int>{2, 3});
  CHECK(plan->nodes[2].ranks == std::vector<int>{4});
  CHECK(plan->nodes[0].cpus == 2);
  CHECK(plan->nodes[1].cpus == 2);
  CHECK(plan->nodes[2].cpus == 1);
  CHECK(plan->nodes[2].gpus == 0);
}

TEST_CASE("PACK puts every worker on the first node that fits them all") {
  const std::vector<node_resources> nodes = {idle("small", 2), idle("big", 8)};
  const auto plan = plan_placement(pack(4), nodes);
  REQUIRE(plan);
  REQUIRE(plan->nodes.size() == 1);
  CHECK(plan->nodes[0].node_id == "big");
  CHECK(plan->nodes[0].ranks == std::vector<int>{0, 1, 2, 3});
  CHECK(plan->nodes[0].cpus == 4);
}

TEST_CASE("PACK prefers the earliest of several nodes that fit the whole job") {
  const std::vector<node_resources> nodes = {idle("a", 1), idle("b", 4), idle("c", 16)};
  const auto plan = plan_placement(pack(4), nodes);
  REQUIRE(plan);
  CHECK(node_ids(*plan) == std::vector<std::string>{"b"});
}

TEST_CASE("PACK uses a node that fits the job exactly") {
  const auto plan = plan_placement(pack(3, 2), {idle("a", 6)});
  REQUIRE(plan);
  CHECK(plan->nodes[0].cpus == 6);
  CHECK(plan->nodes[0].ranks == std::vector<int>{0, 1, 2});
}

TEST_CASE("PACK returns nothing when the cluster cannot hold every worker") {
  CHECK_FALSE(plan_placement(pack(7), {idle("a", 2), idle("b", 2), idle("c", 2)}));
  CHECK_FALSE(plan_placement(pack(1), {}));
  CHECK_FALSE(plan_placement(pack(1, 4), {idle("a", 3), idle("b", 3)}));
}

TEST_CASE("PACK never splits a worker across nodes") {
  // 2 + 2 free CPUs hold 4 CPUs in total, but no node holds a 3-CPU worker.
  CHECK_FALSE(plan_placement(pack(1, 3), {idle("a", 2), idle("b", 2)}));
  // Two 3-CPU workers need two nodes with 3 free each, not 6 in total.
  CHECK_FALSE(plan_placement(pack(2, 3), {idle("a", 5), idle("b", 1)}));
}

TEST_CASE("PACK is limited by free GPUs when workers need them") {
  const std::vector<node_resources> nodes = {idle("a", 16, 1), idle("b", 16, 2)};
  const auto plan = plan_placement(pack(3, 1, 1), nodes);
  REQUIRE(plan);
  check_plan(pack(3, 1, 1), nodes, *plan);
  REQUIRE(plan->nodes.size() == 2);
  CHECK(plan->nodes[0].ranks == std::vector<int>{0});
  CHECK(plan->nodes[0].gpus == 1);
  CHECK(plan->nodes[1].ranks == std::vector<int>{1, 2});
  CHECK(plan->nodes[1].gpus == 2);
  CHECK_FALSE(plan_placement(pack(4, 1, 1), nodes));
  CHECK_FALSE(plan_placement(pack(1, 1, 1), {idle("cpu-only", 64)}));
}

TEST_CASE("PACK skips nodes whose free resources fit no worker") {
  // "busy" has 8 CPUs of which 1 is free; workers need 2.
  const std::vector<node_resources> nodes = {
    idle("a", 2), {"busy", 8, 0, 1, 0}, idle("c", 4)};
  const auto plan = plan_placement(pack(3, 2), nodes);
  REQUIRE(plan);
  check_plan(pack(3, 2), nodes, *plan);
  CHECK(node_ids(*plan) == std::vector<std::string>{"a", "c"});
  CHECK(plan->nodes[0].ranks == std::vector<int>{0});
  CHECK(plan->nodes[1].ranks == std::vector<int>{1, 2});
}

TEST_CASE("PACK stops at the node that places the last worker") {
  const auto plan = plan_placement(pack(3), {idle("a", 2), idle("b", 2), idle("c", 2)});
  REQUIRE(plan);
  CHECK(node_ids(*plan) == std::vector<std::string>{"a", "b"});
  CHECK(plan->nodes[1].ranks == std::vector<int>{2});
}

TEST_CASE("colocated places 3 hosts x 2 workers on three distinct nodes") {
  const std::vector<node_resources> nodes = {idle("a", 4), idle("b", 4), idle("c", 4)};
  const auto req = colocated(3, 2, 2);
  const auto plan = plan_placement(req, nodes);
  REQUIRE(plan);
  check_plan(req, nodes, *plan);
  CHECK(node_ids(*plan) == std::vector<std::string>{"a", "b", "c"});
  CHECK(plan->nodes[0].ranks == std::vector<int>{0, 1});
  CHECK(plan->nodes[1].ranks == std::vector<int>{2, 3});
  CHECK(plan->nodes[2].ranks == std::vector<int>{4, 5});
  for (const auto& node : plan->nodes) {
    CHECK(node.cpus == 4);
    CHECK(node.gpus == 0);
  }
}

TEST_CASE("colocated spreads hosts even when one node could hold the whole job") {
  const std::vector<node_resources> nodes = {idle("huge", 64), idle("b", 2)};
  const auto plan = plan_placement(colocated(2, 2), nodes);
  REQUIRE(plan);
  CHECK(node_ids(*plan) == std::vector<std::string>{"huge", "b"});
  CHECK(plan->nodes[0].cpus == 2);
}

TEST_CASE("colocated returns nothing when fewer nodes than hosts fit") {
  const std::vector<node_resources> nodes = {idle("a", 4), idle("b", 4), idle("c", 1)};
  CHECK_FALSE(plan_placement(colocated(3, 2), nodes));
  CHECK_FALSE(plan_placement(colocated(1, 1), {}));
  CHECK(plan_placement(colocated(2, 2), nodes));
}

TEST_CASE("colocated skips a node with only part of a host's resources free") {
  const std::vector<node_resources> nodes = {
    {"a", 8, 2, 3, 2}, idle("b", 4, 2), {"c", 8, 2, 8, 1}, idle("d", 4, 2)};
  const auto req = colocated(2, 2, 2, 1);
  const auto plan = plan_placement(req, nodes);
  REQUIRE(plan);
  check_plan(req, nodes, *plan);
  CHECK(node_ids(*plan) == std::vector<std::string>{"b", "d"});
  CHECK(plan->nodes[0].ranks == std::vector<int>{0, 1});
  CHECK(plan->nodes[1].ranks == std::vector<int>{2, 3});
  CHECK(plan->nodes[1].cpus == 4);
  CHECK(plan->nodes[1].gpus == 2);
}

TEST_CASE("colocated takes the first fitting nodes and leaves the rest") {
  const auto plan = plan_placement(colocated(2, 1),
                                   {idle("a", 1), idle("b", 1), idle("c", 1), idle("d", 1)});
  REQUIRE(plan);
  CHECK(node_ids(*plan) == std::vector<std::string>{"a", "b"});
}

TEST_CASE("invalid sizes are rejected with invalid_argument") {
  const std::vector<node_resources> nodes = {idle("a", 8)};
  CHECK_THROWS_AS(plan_placement(pack(0), nodes), std::invalid_argument);
  CHECK_THROWS_AS(plan_placement(pack(-1), nodes), std::invalid_argument);
  CHECK_THROWS_AS(plan_placement(pack(1, 0), nodes), std::invalid_argument);
  CHECK_THROWS_AS(plan_placement(pack(1, -2), nodes), std::invalid_argument);
  CHECK_THROWS_AS(plan_placement(pack(1, 1, -1), nodes), std::invalid_argument);
  CHECK_THROWS_AS(plan_placement(colocated(0, 2), nodes), std::invalid_argument);
  CHECK_THROWS_AS(plan_placement(colocated(-1, 2), nodes), std::invalid_argument);
  CHECK_THROWS_AS(plan_placement(colocated(1, 1, 0), nodes), std::invalid_argument);
  CHECK_THROWS_AS(plan_placement(colocated(1, 2, 1, -1), nodes), std::invalid_argument);
  CHECK_THROWS_AS(plan_placement(colocated(1 << 20, 1 << 20), nodes), std::invalid_argument);
  // Invalid requests are rejected even when there is nowhere to place them.
  CHECK_THROWS_AS(plan_placement(pack(0), {}), std::invalid_argument);
}

TEST_CASE("a request naming both num_workers and num_hosts is rejected") {
  auto both = colocated(2, 2);
  both.num_workers = 4;
  CHECK_THROWS_AS(plan_placement(both, {idle("a", 8)}), std::invalid_argument);
  auto hosts_only = pack(4);
  hosts_only.num_hosts = 2;
  CHECK_THROWS_AS(plan_placement(hosts_only, {idle("a", 8)}), std::invalid_argument);
  auto negative_per_host = pack(4);
  negative_per_host.workers_per_host = -1;
  CHECK_THROWS_AS(plan_placement(negative_per_host, {idle("a", 8)}), std::invalid_argument);
}

TEST_CASE("the invalid_argument message names the field and the request") {
  try {
    plan_placement(pack(1, 0), {idle("a", 8)});
    FAIL("expected invalid_argument");
  } catch (const std::invalid_argument& e) {
    CHECK(contains(e.what(), "cpus_per_worker must be at least 1"));
    CHECK(contains(e.what(), "cpus_per_worker=0"));
  }
}

TEST_CASE("two nodes with the same id are rejected") {
  try {
    plan_placement(pack(1), {idle("a", 8), idle("b", 8), idle("a", 8)});
    FAIL("expected invalid_argument");
  } catch (const std::invalid_argument& e) {
    CHECK(contains(e.what(), "node 'a' is listed twice"));
  }
}

TEST_CASE("check_unique_nodes accepts distinct nodes and names a repeated one") {
  CHECK_NOTHROW(check_unique_nodes(placement_plan{}));
  CHECK_NOTHROW(check_unique_nodes(placement_plan{{{"a", {0}, 1, 0}, {"b", {1}, 1, 0}}}));
  try {
    check_unique_nodes(placement_plan{{{"a", {0}, 1, 0}, {"a", {1}, 1, 0}}});
    FAIL("expected runtime_error");
  } catch (const std::runtime_error& e) {
    CHECK(std::string(e.what()) == "Colocator actors must be placed on unique nodes! Got: [a, a]");
  }
  CHECK_THROWS_WITH_AS(
    check_unique_nodes(placement_plan{{{"a", {0}, 1, 0}, {"b", {1}, 1, 0}, {"a", {2}, 1, 0}}}),
    "Colocator actors must be placed on unique nodes! Got: [a, b, a]", std::runtime_error);
}

TEST_CASE("describing a PACK request names workers and per-worker and total resources") {
  CHECK(describe(pack(4)) == "4 workers x {CPU: 1, GPU: 0} = {CPU: 4, GPU: 0}");
  CHECK(describe(pack(3, 2, 1)) == "3 workers x {CPU: 2, GPU: 1} = {CPU: 6, GPU: 3}");
}

TEST_CASE("describing a colocated request names hosts, workers and per-host needs") {
  CHECK(describe(colocated(2, 4))
        == "2 hosts x 4 workers x {CPU: 1, GPU: 0} = {CPU: 8, GPU: 0}, "
           "each host needs {CPU: 4, GPU: 0}");
  CHECK(describe(colocated(3, 2, 4, 1))
        == "3 hosts x 2 workers x {CPU: 4, GPU: 1} = {CPU: 24, GPU: 6}, "
           "each host needs {CPU: 8, GPU: 2}");
  // Totals beyond int range print correctly.
  CHECK(contains(describe(colocated(1 << 16, 1 << 16)), "{CPU: 4294967296, GPU: 0}"));
}

TEST_CASE("describing nodes lists each node's free and total resources") {
  CHECK(describe(std::vector<node_resources>{}) == "no live nodes");
  CHECK(describe({idle("a", 2)}) == "node 'a': CPU 2 free of 2, GPU 0 free of 0");
  CHECK(describe({{"a", 8, 2, 3, 1}, idle("b", 4, 4)})
        == "node 'a': CPU 3 free of 8, GPU 1 free of 2; node 'b': CPU 4 free of 4, "
           "GPU 4 free of 4");
}

TEST_CASE("random clusters get a valid plan exactly when capacity allows") {
  // Property test over small random clusters; a fixed LCG keeps it
  // reproducible across standard libraries.
  std::uint32_t state = 20240601u;
  auto next = [&state](int bound) {
    state = state * 1664525u + 1013904223u;
    return static_cast<int>((state >> 8) % static_cast<std::uint32_t>(bound));
  };
  int refused = 0;
  int pack_single = 0;
  int pack_multi = 0;
  int colocated_planned = 0;
  for (int trial = 0; trial < 1000; ++trial) {
    CAPTURE(trial);
    std::vector<node_resources> nodes;
    const int num_nodes = next(7); // 0..6 nodes
    for (int i = 0; i < num_nodes; ++i) {
      node_resources node;
      node.node_id = "n" + std::to_string(i);
      node.total_cpus = next(13);
      node.total_gpus = next(5);
      // Mostly idle nodes, some partly busy.
      node.free_cpus = node.total_cpus - (next(3) == 0 ? next(node.total_cpus + 1) : 0);
      node.free_gpus = node.total_gpus - (next(3) == 0 ? next(node.total_gpus + 1) : 0);
      nodes.push_back(node);
    }
    const int cpus = 1 + next(3);
    const int gpus = next(2) == 0 ? 0 : 1 + next(2); // half the jobs need no GPU
    const auto req = next(2) == 0 ? pack(1 + next(12), cpus, gpus)
                                  : colocated(1 + next(4), 1 + next(4), cpus, gpus);
    CAPTURE(describe(req));
    CAPTURE(describe(nodes));
    // Brute-force capacity: count workers one at a time per node.
    int capacity = 0;
    int hosts_that_fit = 0;
    for (const auto& node : nodes) {
      int fit = 0;
      while ((fit + 1) * cpus <= node.free_cpus && (fit + 1) * gpus <= node.free_gpus)
        ++fit;
      capacity += fit;
      hosts_that_fit += fit >= req.workers_per_host ? 1 : 0;
    }
    const bool feasible = req.colocated() ? hosts_that_fit >= req.num_hosts
                                          : capacity >= req.num_workers;
    const auto plan = plan_placement(req, nodes);
    CHECK(plan.has_value() == feasible);
    if (plan) {
      check_plan(req, nodes, *plan);
      ++(req.colocated() ? colocated_planned : plan->nodes.size() == 1 ? pack_single : pack_multi);
      // PACK uses one node whenever one node fits the whole job.
      if (!req.colocated()) {
        for (const auto& node : nodes) {
          if (workers_that_fit(node, cpus, gpus) >= req.num_workers) {
            CHECK(plan->nodes.size() == 1);
            CHECK(plan->nodes[0].node_id == node.node_id);
            break;
          }
        }
      }
    } else {
      ++refused;
    }
  }
  // The generator exercises every outcome, not just the easy ones.
  CHECK(refused > 100);
  CHECK(pack_single > 30);
  CHECK(pack_multi > 30);
  CHECK(colocated_planned > 30);
}

} // TEST_SUITE
