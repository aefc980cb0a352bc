// The shared-memory path's plain pieces: the view of a fused batch's
// buffers as one byte range (gather, scatter, direct pointers) against a
// flat copy, over random partitions; and which path each job takes
// (host_paths), decided from every rank's place.

#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <vector>

#include <doctest/doctest.h>

#include "collectives/backends/host_paths.hpp"
#include "collectives/backends/shm/parts_view.hpp"

namespace co = hvactor::collectives;

TEST_SUITE("shared-memory pieces") {

TEST_CASE("a parts view gathers and scatters any range exactly as the concatenation would, and "
          "gives a direct pointer only inside one buffer") {
  std::mt19937 rng{7};
  for (int round = 0; round < 300; ++round) {
    int parts = 1 + static_cast<int>(rng() % 6);
    std::vector<std::vector<int32_t>> bufs;
    std::vector<int32_t> flat;
    std::vector<co::buffer_part> view_parts;
    for (int p = 0; p < parts; ++p) {
      bufs.emplace_back(rng() % 9); // empty buffers too
      for (auto& x : bufs.back()) {
        x = static_cast<int32_t>(rng());
        flat.push_back(x);
      }
    }
    for (auto& b : bufs)
      view_parts.push_back({b.data(), b.size()});
    co::shm::parts_view v;
    v.assign(view_parts, sizeof(int32_t));
    REQUIRE(v.bytes() == flat.size() * 4);
    if (flat.empty())
      continue;
    size_t from = rng() % flat.size(), len = 1 + rng() % (flat.size() - from);
    std::vector<int32_t> got(len);
    v.gather(from * 4, len * 4, reinterpret_cast<std::byte*>(got.data()));
    CHECK(std::memcmp(got.data(), flat.data() + from, len * 4) == 0);
    // Scatter new values and read them back through the buffers.
    for (auto& x : got)
      x = ~x;
    v.scatter(reinterpret_cast<const std::byte*>(got.data()), from * 4, len * 4);
    for (size_t i = 0; i < len; ++i)
      flat[from + i] = got[i];
    std::vector<int32_t> again;
    for (auto& b : bufs)
      again.insert(again.end(), b.begin(), b.end());
    CHECK(again == flat);
    // contiguous(): non-null exactly when the range lies in one buffer.
    size_t at = 0;
    bool inside = false;
    for (auto& b : bufs) {
      if (from >= at && from + len <= at + b.size() && !b.empty())
        inside = true;
      at += b.size();
    }
    CHECK((v.contiguous(from * 4, len * 4) != nullptr) == inside);
  }
}

TEST_CASE("one node takes shared memory; equal nodes are hierarchical; anything else is Gloo "
          "with the reason") {
  auto place = [](uint64_t seg, int lr, int ls, int cr, int cs) {
    return co::rank_place{seg, 8, lr, ls, cr, cs, 100 + lr};
  };
  co::path_settings on;
  // 3 ranks on one node.
  std::vector<co::rank_place> one{place(7, 0, 3, 0, 1), place(7, 1, 3, 0, 1), place(7, 2, 3, 0, 1)};
  auto p = co::host_paths::plan(one, 1, on);
  CHECK(p.shm);
  CHECK(p.single_node);
  CHECK(p.local_ranks == std::vector<int>{0, 1, 2});
  // 2 nodes x 2: hierarchical; world_of maps (cross, local) to ranks.
  std::vector<co::rank_place> two{place(5, 0, 2, 0, 2), place(5, 1, 2, 0, 2),
                                  place(9, 0, 2, 1, 2), place(9, 1, 2, 1, 2)};
  p = co::host_paths::plan(two, 3, on);
  CHECK(p.hierarchical_allreduce);
  CHECK(p.hierarchical_allgather);
  CHECK(p.nodes == 2);
  CHECK(p.world_of == std::vector<int>{0, 1, 2, 3});
  CHECK(p.local_ranks == std::vector<int>{2, 3});
  // Forbidden, or only allgather.
  co::path_settings no_ar;
  no_ar.hierarchical_allreduce = false;
  p = co::host_paths::plan(two, 0, no_ar);
  CHECK_FALSE(p.hierarchical_allreduce);
  CHECK_FALSE(p.hierarchical_allgather);
  CHECK(p.why == "HOROVOD_HIERARCHICAL_ALLREDUCE=0");
  no_ar.hierarchical_allgather = true;
  p = co::host_paths::plan(two, 0, no_ar);
  CHECK_FALSE(p.hierarchical_allreduce);
  CHECK(p.hierarchical_allgather);
  // Uneven nodes, a rank without a segment, HVACTOR_SHM=0.
  std::vector<co::rank_place> uneven{place(5, 0, 2, 0, 2), place(5, 1, 2, 0, 2),
                                     place(9, 0, 1, 1, 2)};
  p = co::host_paths::plan(uneven, 0, on);
  CHECK_FALSE(p.hierarchical_allreduce);
  CHECK(p.why == "the nodes have different numbers of ranks");
  auto missing = one;
  missing[2].segment = 0;
  p = co::host_paths::plan(missing, 0, on);
  CHECK_FALSE(p.shm);
  CHECK(p.why.find("rank 2 started without") != std::string::npos);
  co::path_settings off;
  off.shm = false;
  CHECK(co::host_paths::plan(one, 0, off).why == "HVACTOR_SHM=0");
  // Workers started one by one (elastic): each its own segment of one.
  std::vector<co::rank_place> lone{place(1, 0, 2, 0, 1), place(2, 1, 2, 0, 1)};
  p = co::host_paths::plan(lone, 0, on);
  CHECK_FALSE(p.shm);
  CHECK(p.why.find("elastic") != std::string::npos);
  // One rank per node: Gloo unless forced.
  std::vector<co::rank_place> singles{place(1, 0, 1, 0, 2), place(2, 0, 1, 1, 2)};
  CHECK_FALSE(co::host_paths::plan(singles, 0, on).hierarchical_allreduce);
  co::path_settings forced;
  forced.hierarchical_allreduce = true;
  CHECK(co::host_paths::plan(singles, 0, forced).hierarchical_allreduce);
  // The switches' values.
  CHECK(co::path_settings::parse_switch("", "X") == std::nullopt);
  CHECK(co::path_settings::parse_switch("1", "X") == true);
  CHECK(co::path_settings::parse_switch("0", "X") == false);
  CHECK_THROWS_WITH_AS(co::path_settings::parse_switch("yes", "HOROVOD_HIERARCHICAL_ALLREDUCE"),
                       doctest::Contains("HOROVOD_HIERARCHICAL_ALLREDUCE=yes"),
                       std::invalid_argument);
}

} // TEST_SUITE
