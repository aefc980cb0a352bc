// hvd::elastic::elastic_sampler (Horovod's ElasticSampler) without ranks:
// the partition of an epoch, the indices left after a reset to another
// world size, epochs, determinism, and its state.

#include <algorithm>
#include <set>
#include <stdexcept>
#include <vector>

#include <doctest/doctest.h>

#include "hvactor/elastic_sampler.hpp"

using hvactor::hvd::elastic::elastic_sampler;

namespace {

/// Every rank's indices for a world of `size`.
std::vector<std::vector<size_t>> world(elastic_sampler s, int size) {
  std::vector<std::vector<size_t>> out;
  for (int r = 0; r < size; ++r) {
    s.reset(r, size);
    out.push_back(s.indices());
  }
  return out;
}

} // namespace

TEST_SUITE("elastic_sampler") {

TEST_CASE("an epoch's indices split over the ranks like DistributedSampler: disjoint up to the "
          "padding, every index once, the same count per rank") {
  elastic_sampler s{103, true, 7};
  auto ranks = world(s, 4);
  std::multiset<size_t> all;
  for (auto& r : ranks) {
    CHECK(r.size() == 26); // ceil(103 / 4)
    all.insert(r.begin(), r.end());
  }
  CHECK(all.size() == 104);
  for (size_t i = 0; i < 103; ++i)
    CHECK(all.count(i) >= 1);
  // Shuffled, and the same on every rank (a second sampler, same seed).
  elastic_sampler again{103, true, 7};
  again.reset(2, 4);
  CHECK(again.indices() == ranks[2]);
  std::vector<size_t> in_order(ranks[0].begin(), ranks[0].end());
  CHECK_FALSE(std::is_sorted(in_order.begin(), in_order.end()));
  // Without shuffle: rank r gets r, r + size, ...
  elastic_sampler plain{10, false};
  plain.reset(1, 3);
  CHECK(plain.indices() == std::vector<size_t>{1, 4, 7, 0});
}

TEST_CASE("after a reset to another world size the rest of the epoch is exactly the indices not "
          "yet processed") {
  elastic_sampler s{100, true, 3};
  s.reset(0, 4);
  auto before = world(s, 4);
  // 3 batches of 5 per rank on 4 ranks: 60 processed.
  for (size_t b = 0; b < 3; ++b)
    s.record_batch(b, 5);
  CHECK(s.processed_num() == 60);
  std::set<size_t> seen;
  for (auto& r : before)
    seen.insert(r.begin(), r.begin() + 15);
  CHECK(seen.size() == 60);
  auto after = world(s, 3); // a rank died: 3 left
  std::set<size_t> rest;
  for (auto& r : after) {
    CHECK(r.size() == 14); // ceil(40 / 3)
    rest.insert(r.begin(), r.end());
  }
  CHECK(rest.size() == 40);
  for (auto i : rest)
    CHECK(seen.count(i) == 0);
  // A state taken now and loaded elsewhere gives the same split.
  elastic_sampler other{100, true, 3};
  other.load_state(s.state());
  other.reset(1, 3);
  CHECK(other.indices() == after[1]);
}

TEST_CASE("set_epoch starts a new permutation with nothing processed; bad states are refused") {
  elastic_sampler s{50, true, 11};
  s.reset(0, 1);
  auto e0 = s.indices();
  s.record_batch(0, 10);
  s.set_epoch(1);
  CHECK(s.processed_num() == 0);
  CHECK(s.epoch() == 1);
  CHECK(s.indices().size() == 50);
  CHECK(s.indices() != e0);
  s.set_epoch(0);
  CHECK(s.indices() == e0);
  CHECK_THROWS_AS(s.load_state({-1, 0}), std::invalid_argument);
  CHECK_THROWS_AS(s.reset(3, 3), std::invalid_argument);
  // Everything processed: nothing left, on any world.
  s.load_state({0, 500});
  CHECK(s.indices().empty());
}

} // TEST_SUITE
