// The hierarchical reducescatter's plan (reducescatter_columns) as a plain
// class: a worked 2 x 2 layout, and every step of the collective simulated
// in one process over random layouts and uneven parts (zeros included):
// each rank ends with exactly its part of the sum, and what crosses the
// nodes is each rank's column less its own part.

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include <doctest/doctest.h>

#include "collectives/backends/reducescatter_columns.hpp"

namespace co = hvactor::collectives;

namespace {

co::host_paths layout(int nodes, int local_size, std::vector<int> world_of) {
  co::host_paths p;
  p.shm = true;
  p.hierarchical_allreduce = true;
  p.nodes = nodes;
  p.local_size = local_size;
  p.world_of = std::move(world_of);
  return p;
}

} // namespace

TEST_SUITE("reducescatter columns") {

TEST_CASE("on 2 nodes x 2 ranks with uneven parts, column l holds the parts of local rank l's "
          "ranks in node order, and a rank sends its column's parts and receives its own") {
  auto p = layout(2, 2, {0, 1, 2, 3});
  std::vector<size_t> counts{3, 2, 2, 1}; // parts at 0, 3, 5, 7
  auto plan = co::reducescatter_columns::plan(p, counts, 3, 1);
  REQUIRE(plan.columns.size() == 2);
  CHECK(plan.columns[0].begin == 0);
  CHECK(plan.columns[0].count == 5); // ranks 0 and 2
  CHECK(plan.columns[1].begin == 5);
  CHECK(plan.columns[1].count == 3); // ranks 1 and 3
  CHECK(plan.to == std::vector<size_t>{0, 3, 5, 7});
  std::vector<size_t> begins;
  for (auto& f : plan.from)
    begins.push_back(f.begin);
  CHECK(begins == std::vector<size_t>{0, 5, 3, 7});
  CHECK(plan.sends == std::vector<int64_t>{2, 1});
  CHECK(plan.receives == std::vector<int64_t>{1, 1});
  std::vector<int32_t> in{0, 1, 2, 3, 4, 5, 6, 7}, out(8);
  plan.arrange(in.data(), out.data(), sizeof(int32_t));
  CHECK(out == std::vector<int32_t>{0, 1, 2, 5, 6, 3, 4, 7});
}

TEST_CASE("simulated over random layouts and uneven parts, the node's column reduction, the "
          "cross-node exchange and the fold give every rank its part of the sum, and a rank "
          "sends across only the other nodes' parts of its column") {
  std::mt19937 rng{59};
  for (int round = 0; round < 200; ++round) {
    int nodes = 1 + static_cast<int>(rng() % 4), local = 1 + static_cast<int>(rng() % 4);
    int n = nodes * local;
    std::vector<int> world_of(static_cast<size_t>(n));
    std::iota(world_of.begin(), world_of.end(), 0);
    if (round % 2 == 1)
      std::shuffle(world_of.begin(), world_of.end(), rng);
    auto p = layout(nodes, local, world_of);
    auto world = [&](int c, int l) { return world_of[static_cast<size_t>(c * local + l)]; };
    std::vector<size_t> counts(static_cast<size_t>(n));
    for (auto& c : counts)
      c = rng() % 5; // zeros too
    size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
    std::vector<std::vector<int64_t>> x(static_cast<size_t>(n), std::vector<int64_t>(total));
    std::vector<int64_t> sum(total);
    for (auto& xs : x)
      for (size_t i = 0; i < total; ++i) {
        xs[i] = static_cast<int64_t>(rng() % 1000) - 500;
        sum[i] += xs[i];
      }
    // Every rank's plan and column-ordered copy; the node's reduction.
    std::vector<co::reducescatter_columns> plans(static_cast<size_t>(n));
    std::vector<std::vector<int64_t>> node_sum(static_cast<size_t>(nodes),
                                               std::vector<int64_t>(total));
    for (int c = 0; c < nodes; ++c)
      for (int l = 0; l < local; ++l) {
        auto w = static_cast<size_t>(world(c, l));
        plans[w] = co::reducescatter_columns::plan(p, counts, static_cast<int>(w), l);
        std::vector<int64_t> arranged(total);
        plans[w].arrange(x[w].data(), arranged.data(), sizeof(int64_t));
        for (size_t i = 0; i < total; ++i)
          node_sum[static_cast<size_t>(c)][i] += arranged[i];
      }
    // The exchange among the ranks of local rank l: node c' sends chunk c
    // of its column (by its sends) to node c, which folds what it got.
    size_t sent_total = 0, wanted_sent = 0;
    for (int c = 0; c < nodes; ++c)
      for (int l = 0; l < local; ++l) {
        auto w = static_cast<size_t>(world(c, l));
        auto& plan = plans[w];
        std::vector<int64_t> received;
        for (int from = 0; from < nodes; ++from) {
          auto& theirs = plans[static_cast<size_t>(world(from, l))];
          size_t at = theirs.columns[static_cast<size_t>(l)].begin;
          for (int k = 0; k < c; ++k)
            at += static_cast<size_t>(theirs.sends[static_cast<size_t>(k)]);
          auto len = static_cast<size_t>(theirs.sends[static_cast<size_t>(c)]);
          REQUIRE(len == static_cast<size_t>(plan.receives[static_cast<size_t>(from)]));
          auto& src = node_sum[static_cast<size_t>(from)];
          received.insert(received.end(), src.begin() + static_cast<ptrdiff_t>(at),
                          src.begin() + static_cast<ptrdiff_t>(at + len));
        }
        std::vector<int64_t> out(counts[w]);
        plan.fold(received.data(), out.data(), hvactor::hvd::dtype::int64, hvactor::hvd::op::sum);
        size_t begin = std::accumulate(counts.begin(), counts.begin() + static_cast<ptrdiff_t>(w),
                                       size_t{0});
        CHECK(std::equal(out.begin(), out.end(), sum.begin() + static_cast<ptrdiff_t>(begin)));
        for (int k = 0; k < nodes; ++k)
          if (k != c)
            sent_total += static_cast<size_t>(plan.sends[static_cast<size_t>(k)]);
        wanted_sent += plan.columns[static_cast<size_t>(l)].count - counts[w];
      }
    // Every element crosses once, from every other node: (nodes - 1) x total.
    CHECK(sent_total == wanted_sent);
    CHECK(sent_total == static_cast<size_t>(nodes - 1) * total);
  }
}

} // TEST_SUITE
