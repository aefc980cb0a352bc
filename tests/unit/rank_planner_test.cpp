#include "actors/placement/rank_planner.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <doctest/doctest.h>

using hvactor::rank_layout;
using hvactor::rank_planner;

namespace {

/// Registers ranks 0..n-1 in rank order, rank r on `node_of(r)`.
template <class F>
rank_planner register_ranks(int n, F node_of) {
  rank_planner planner;
  for (int r = 0; r < n; ++r)
    planner.add(r, node_of(r));
  return planner;
}

/// The message plan() throws, or "" if it does not throw.
std::string plan_error(const rank_planner& planner) {
  try {
    planner.plan();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

/// Checks the invariants every layout must satisfy, whatever the nodes.
void check_consistent(const std::vector<rank_layout>& layouts) {
  const int n = static_cast<int>(layouts.size());
  std::map<std::pair<int, int>, int> by_local_and_cross; // (local, cross) -> rank
  for (int r = 0; r < n; ++r) {
    const auto& l = layouts[static_cast<std::size_t>(r)];
    CHECK(l.rank == r);
    CHECK(l.size == n);
    CHECK(l.local_rank >= 0);
    CHECK(l.local_rank < l.local_size);
    CHECK(l.cross_rank >= 0);
    CHECK(l.cross_rank < l.cross_size);
    // (local_rank, cross_rank) names a worker uniquely.
    CHECK(by_local_and_cross.emplace(std::pair{l.local_rank, l.cross_rank}, r).second);
  }
  // Each local-rank index has cross ranks 0..cross_size-1, each once.
  for (const auto& l : layouts)
    for (int c = 0; c < l.cross_size; ++c)
      CHECK(by_local_and_cross.count({l.local_rank, c}) == 1);
}

} // namespace

TEST_SUITE("rank_planner") {

TEST_CASE("nothing registered plans an empty layout") {
  rank_planner planner;
  CHECK(planner.plan().empty());
}

TEST_CASE("a single rank is rank 0 of 1 everywhere") {
  rank_planner planner;
  planner.add(0, "only");
  const auto layouts = planner.plan();
  REQUIRE(layouts.size() == 1);
  const auto& l = layouts[0];
  CHECK(l.rank == 0);
  CHECK(l.size == 1);
  CHECK(l.local_rank == 0);
  CHECK(l.local_size == 1);
  CHECK(l.cross_rank == 0);
  CHECK(l.cross_size == 1);
}

TEST_CASE("ranks on one node get local rank = rank and cross size 1") {
  const auto layouts = register_ranks(6, [](int) { return "a"; }).plan();
  REQUIRE(layouts.size() == 6);
  check_consistent(layouts);
  for (int r = 0; r < 6; ++r) {
    CHECK(layouts[r].local_rank == r);
    CHECK(layouts[r].local_size == 6);
    CHECK(layouts[r].cross_rank == 0);
    CHECK(layouts[r].cross_size == 1);
  }
}

TEST_CASE("one rank per node gives local rank 0 and cross rank = node index") {
  const auto layouts = register_ranks(4, [](int r) { return "n" + std::to_string(r); }).plan();
  check_consistent(layouts);
  for (int r = 0; r < 4; ++r) {
    CHECK(layouts[r].local_rank == 0);
    CHECK(layouts[r].local_size == 1);
    CHECK(layouts[r].cross_rank == r);
    CHECK(layouts[r].cross_size == 4);
  }
}

TEST_CASE("12 ranks round-robin on three nodes have cross size 3 and local size 4") {
  const std::string abc = "abc";
  const auto layouts = register_ranks(12, [&](int r) { return std::string(1, abc[r % 3]); })
                         .plan();
  REQUIRE(layouts.size() == 12);
  check_consistent(layouts);
  for (int r = 0; r < 12; ++r) {
    CAPTURE(r);
    CHECK(layouts[r].size == 12);
    CHECK(layouts[r].local_size == 4);
    CHECK(layouts[r].cross_size == 3);
    CHECK(layouts[r].local_rank == r / 3); // ranks keep registration order
    CHECK(layouts[r].cross_rank == r % 3); // nodes in first-registration order
  }
}

TEST_CASE("ranks 5/4/3 on three nodes give cross sizes 3, then 2, then 1") {
  // Horovod's test_cross_rank: 0-4 on node 1, 5-8 on node 2, 9-11 on node 3.
  const auto layouts = register_ranks(12, [](int r) {
                         return r < 5 ? "node1" : r < 9 ? "node2" : "node3";
                       }).plan();
  REQUIRE(layouts.size() == 12);
  check_consistent(layouts);
  std::map<int, std::vector<int>> cross_ranks_by_size;
  for (const auto& l : layouts)
    cross_ranks_by_size[l.cross_size].push_back(l.cross_rank);
  REQUIRE(cross_ranks_by_size.size() == 3);
  CHECK(cross_ranks_by_size[1].size() == 1);
  CHECK(cross_ranks_by_size[2].size() == 2);
  CHECK(cross_ranks_by_size[3].size() == 9);
  CHECK(std::set<int>(cross_ranks_by_size[2].begin(), cross_ranks_by_size[2].end())
        == std::set<int>{0, 1});
  CHECK(cross_ranks_by_size[1] == std::vector<int>{0});
  // The lone cross-size-1 worker is local rank 4 on node 1; the two of size 2
  // are local rank 3 on nodes 1 and 2.
  CHECK(layouts[4].cross_size == 1);
  CHECK(layouts[3].cross_size == 2);
  CHECK(layouts[3].cross_rank == 0);
  CHECK(layouts[8].cross_size == 2);
  CHECK(layouts[8].cross_rank == 1);
  // Local ranks per node are 0..k-1 with local size k.
  const std::vector<std::pair<int, int>> nodes = {{0, 5}, {5, 4}, {9, 3}}; // first rank, k
  for (const auto& [first, k] : nodes) {
    for (int i = 0; i < k; ++i) {
      CHECK(layouts[first + i].local_rank == i);
      CHECK(layouts[first + i].local_size == k);
    }
  }
  // Local ranks 0..2 exist on all three nodes: cross rank = node index.
  CHECK(layouts[0].cross_rank == 0);
  CHECK(layouts[5].cross_rank == 1);
  CHECK(layouts[9].cross_rank == 2);
}

TEST_CASE("nodes are ordered by first registration, not by name") {
  // "z" registers first, so it is cross rank 0 although "a" sorts first.
  rank_planner planner;
  planner.add(0, "z");
  planner.add(1, "a");
  planner.add(2, "z");
  planner.add(3, "a");
  const auto layouts = planner.plan();
  check_consistent(layouts);
  CHECK(layouts[0].cross_rank == 0);
  CHECK(layouts[1].cross_rank == 1);
  CHECK(layouts[2].cross_rank == 0);
  CHECK(layouts[3].cross_rank == 1);
}

TEST_CASE("local ranks follow registration order even when ranks arrive out of order") {
  // Horovod enumerates each node's list as registered; so do we.
  rank_planner planner;
  planner.add(3, "b");
  planner.add(1, "a");
  planner.add(0, "b");
  planner.add(2, "a");
  const auto layouts = planner.plan();
  REQUIRE(layouts.size() == 4);
  check_consistent(layouts);
  CHECK(layouts[3].local_rank == 0); // first on b
  CHECK(layouts[0].local_rank == 1);
  CHECK(layouts[1].local_rank == 0); // first on a
  CHECK(layouts[2].local_rank == 1);
  // b registered first, so it is cross rank 0 at both local indices.
  CHECK(layouts[3].cross_rank == 0);
  CHECK(layouts[0].cross_rank == 0);
  CHECK(layouts[1].cross_rank == 1);
  CHECK(layouts[2].cross_rank == 1);
  for (const auto& l : layouts) {
    CHECK(l.local_size == 2);
    CHECK(l.cross_size == 2);
  }
}

TEST_CASE("a node with more workers than the others holds the extra local ranks alone") {
  rank_planner planner;
  planner.add(0, "small");
  planner.add(1, "big");
  planner.add(2, "big");
  planner.add(3, "big");
  const auto layouts = planner.plan();
  check_consistent(layouts);
  CHECK(layouts[0].cross_size == 2);
  CHECK(layouts[0].cross_rank == 0);
  CHECK(layouts[1].cross_size == 2);
  CHECK(layouts[1].cross_rank == 1);
  CHECK(layouts[2].cross_size == 1);
  CHECK(layouts[2].cross_rank == 0);
  CHECK(layouts[3].cross_size == 1);
  CHECK(layouts[3].cross_rank == 0);
}

TEST_CASE("an empty node id is a node like any other") {
  rank_planner planner;
  planner.add(0, "");
  planner.add(1, "");
  planner.add(2, "x");
  const auto layouts = planner.plan();
  CHECK(layouts[1].local_rank == 1);
  CHECK(layouts[2].cross_rank == 1);
}

TEST_CASE("plan can be called repeatedly and after more registrations") {
  rank_planner planner;
  planner.add(0, "a");
  CHECK(planner.plan().size() == 1);
  CHECK(planner.plan().size() == 1);
  planner.add(1, "b");
  const auto layouts = planner.plan();
  REQUIRE(layouts.size() == 2);
  CHECK(layouts[1].cross_rank == 1);
  CHECK(layouts[1].size == 2);
}

TEST_CASE("a rank registered twice is rejected naming the rank and both nodes") {
  rank_planner planner;
  planner.add(0, "a");
  planner.add(1, "a");
  planner.add(1, "b");
  const auto msg = plan_error(planner);
  CHECK(msg.find("registered twice: 1 (nodes 'a' and 'b')") != std::string::npos);
  CHECK(msg.find("missing: 2") != std::string::npos);
  CHECK(msg.find("0..2") != std::string::npos);
}

TEST_CASE("a rank registered twice on the same node is rejected") {
  rank_planner planner;
  planner.add(0, "a");
  planner.add(0, "a");
  const auto msg = plan_error(planner);
  CHECK(msg.find("registered twice: 0 (nodes 'a' and 'a')") != std::string::npos);
  CHECK(msg.find("missing: 1") != std::string::npos);
}

TEST_CASE("a gap in the ranks is rejected naming the missing and the stray rank") {
  rank_planner planner;
  planner.add(0, "a");
  planner.add(1, "a");
  planner.add(3, "b");
  const auto msg = plan_error(planner);
  CHECK(msg.find("out of range: 3 (node 'b')") != std::string::npos);
  CHECK(msg.find("missing: 2") != std::string::npos);
  CHECK(msg.find("registered twice") == std::string::npos);
}

TEST_CASE("ranks not starting at 0 are rejected") {
  rank_planner planner;
  planner.add(1, "a");
  planner.add(2, "a");
  const auto msg = plan_error(planner);
  CHECK(msg.find("out of range: 2 (node 'a')") != std::string::npos);
  CHECK(msg.find("missing: 0") != std::string::npos);
}

TEST_CASE("a negative rank is rejected") {
  rank_planner planner;
  planner.add(-1, "a");
  const auto msg = plan_error(planner);
  CHECK(msg.find("out of range: -1 (node 'a')") != std::string::npos);
  CHECK(msg.find("missing: 0") != std::string::npos);
}

TEST_CASE("a long list of bad ranks is abbreviated") {
  rank_planner planner;
  for (int r = 100; r < 120; ++r)
    planner.add(r, "a");
  const auto msg = plan_error(planner);
  CHECK(msg.find("and 12 more") != std::string::npos);
  CHECK(msg.size() < 400);
}

TEST_CASE("random node assignments always give consistent layouts") {
  // Property: for any node of every worker, the layout is well formed and
  // matches a direct recount of Horovod's rules.
  unsigned state = 12345;
  auto next = [&state](unsigned bound) {
    state = state * 1103515245u + 12345u;
    return (state >> 16) % bound;
  };
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 1 + static_cast<int>(next(16));
    const unsigned num_nodes = 1 + next(5);
    std::vector<std::string> node_of(static_cast<std::size_t>(n));
    rank_planner planner;
    for (int r = 0; r < n; ++r) {
      node_of[r] = "n" + std::to_string(next(num_nodes));
      planner.add(r, node_of[r]);
    }
    const auto layouts = planner.plan();
    REQUIRE(layouts.size() == static_cast<std::size_t>(n));
    check_consistent(layouts);
    // Recount: local rank = earlier ranks on the same node; local size =
    // ranks on the node; cross rank = nodes first seen earlier with a worker
    // at that local index.
    std::vector<std::string> order;
    for (const auto& node : node_of)
      if (std::find(order.begin(), order.end(), node) == order.end())
        order.push_back(node);
    for (int r = 0; r < n; ++r) {
      const auto& l = layouts[r];
      CHECK(l.local_rank == std::count(node_of.begin(), node_of.begin() + r, node_of[r]));
      CHECK(l.local_size == std::count(node_of.begin(), node_of.end(), node_of[r]));
      int cross_rank = -1;
      int cross_size = 0;
      for (const auto& node : order) {
        if (std::count(node_of.begin(), node_of.end(), node) > l.local_rank) {
          if (node == node_of[r])
            cross_rank = cross_size;
          ++cross_size;
        }
      }
      CHECK(l.cross_rank == cross_rank);
      CHECK(l.cross_size == cross_size);
    }
  }
}

} // TEST_SUITE
