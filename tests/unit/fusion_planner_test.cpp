// The tensor fusion policy as a plain class: batch lengths under a
// threshold, padding, and the split into one reduction per dtype and op.

#include <random>

#include <doctest/doctest.h>

#include "collectives/engine/fusion_planner.hpp"

using hvactor::collectives::fusion_entry;
using hvactor::collectives::fusion_planner;
using hvactor::hvd::dtype;
using hvactor::hvd::op;

namespace {

std::vector<fusion_entry> floats(std::initializer_list<size_t> sizes) {
  std::vector<fusion_entry> out;
  for (auto s : sizes)
    out.push_back({s, dtype::float32, op::sum});
  return out;
}

} // namespace

TEST_SUITE("fusion_planner") {

TEST_CASE("an empty queue makes no batch") {
  fusion_planner p{1 << 20};
  CHECK(p.batch_size({}) == 0);
}

TEST_CASE("entries are padded to 64 bytes") {
  CHECK(fusion_planner::padded(0) == 0);
  CHECK(fusion_planner::padded(1) == 64);
  CHECK(fusion_planner::padded(64) == 64);
  CHECK(fusion_planner::padded(65) == 128);
}

TEST_CASE("a batch takes consecutive entries while their padded sizes fit the threshold") {
  fusion_planner p{256};
  auto q = floats({64, 64, 64, 64, 64});
  CHECK(p.batch_size(q) == 4);
  auto r = floats({100, 100, 10}); // 128 + 128 = 256, the third does not fit
  CHECK(p.batch_size(r) == 2);
}

TEST_CASE("an entry larger than the threshold runs alone") {
  fusion_planner p{256};
  auto q = floats({4096, 4});
  CHECK(p.batch_size(q) == 1);
}

TEST_CASE("threshold 0 turns fusion off") {
  fusion_planner p{0};
  auto q = floats({4, 4, 4});
  CHECK(p.batch_size(q) == 1);
}

TEST_CASE("a batch splits into runs of equal dtype and reduction, average counting as sum") {
  std::vector<fusion_entry> b = {
    {4, dtype::float32, op::sum},   {4, dtype::float32, op::average}, {4, dtype::float64, op::sum},
    {4, dtype::float64, op::sum},   {4, dtype::float32, op::max},     {4, dtype::float32, op::max},
    {4, dtype::int32, op::product},
  };
  auto g = fusion_planner::groups(b);
  REQUIRE(g.size() == 4);
  CHECK(g[0] == std::pair<size_t, size_t>{0, 2});
  CHECK(g[1] == std::pair<size_t, size_t>{2, 4});
  CHECK(g[2] == std::pair<size_t, size_t>{4, 6});
  CHECK(g[3] == std::pair<size_t, size_t>{6, 7});
}

TEST_CASE("random queues: batches never exceed the threshold unless single, groups tile the batch") {
  std::mt19937 rng{42};
  std::uniform_int_distribution<size_t> size{0, 5000};
  std::uniform_int_distribution<int> kind{0, 2};
  for (int round = 0; round < 1000; ++round) {
    fusion_planner p{size(rng) * 4};
    std::vector<fusion_entry> q(1 + size(rng) % 50);
    for (auto& e : q)
      e = {size(rng), static_cast<dtype>(kind(rng)), static_cast<op>(kind(rng))};
    auto n = p.batch_size(q);
    REQUIRE(n >= 1);
    REQUIRE(n <= q.size());
    size_t used = 0;
    for (size_t i = 0; i < n; ++i)
      used += fusion_planner::padded(q[i].bytes);
    if (n > 1)
      CHECK(used <= p.threshold());
    if (n < q.size())
      CHECK(used + fusion_planner::padded(q[n].bytes) > p.threshold());
    auto g = fusion_planner::groups(std::span<const fusion_entry>(q.data(), n));
    size_t next = 0;
    for (auto [b, e] : g) {
      CHECK(b == next);
      CHECK(e > b);
      next = e;
    }
    CHECK(next == n);
  }
}

}
