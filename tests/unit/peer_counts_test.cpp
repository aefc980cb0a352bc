// The counts ranks announce before allgather and alltoall, as plain code:
// every count a peer sends is checked before a buffer is sized from it.

#include <cstdint>
#include <limits>
#include <vector>

#include <doctest/doctest.h>

#include "hvactor/errors.hpp"
#include "collectives/engine/peer_counts.hpp"

using hvactor::collective_error;
using hvactor::collectives::check_allgather_counts;
using hvactor::collectives::check_alltoall_counts;
using hvactor::hvd::dtype;

namespace {

constexpr auto f32 = static_cast<int64_t>(dtype::float32);
constexpr auto f64 = static_cast<int64_t>(dtype::float64);

} // namespace

TEST_SUITE("peer_counts") {

TEST_CASE("counts of one dtype add up to the bytes the receiving buffer gets") {
  std::vector<int64_t> table{3, f32, 0, f32, 5, f32};
  auto c = check_allgather_counts(table, "hvd::allgather");
  CHECK(c.counts == std::vector<size_t>{3, 0, 5});
  CHECK(c.total_bytes == 32);
  auto a = check_alltoall_counts(std::vector<int64_t>{2, f64, 1, f64}, dtype::float64, 0,
                                 "hvd::alltoall");
  CHECK(a.total_bytes == 24);
}

TEST_CASE("a dtype other than rank 0's names both ranks and both dtypes") {
  std::vector<int64_t> table{3, f32, 3, f64};
  CHECK_THROWS_WITH_AS(check_allgather_counts(table, "hvd::allgather"),
                       "hvd::allgather: rank 1 passed float64 but rank 0 passed float32; every "
                       "rank must pass the same dtype",
                       collective_error);
  CHECK_THROWS_WITH_AS(
    check_alltoall_counts(table, dtype::float32, 0, "hvd::alltoall"),
    "hvd::alltoall: rank 1 sends float64 but rank 0 passed float32; every rank must pass the "
    "same dtype",
    collective_error);
  CHECK_THROWS_WITH_AS(check_allgather_counts(std::vector<int64_t>{1, f32, 1, 99}, "x"),
                       doctest::Contains("rank 1 passed an unknown dtype (99)"),
                       collective_error);
}

TEST_CASE("a negative count or a total past size_t is refused, naming the rank") {
  CHECK_THROWS_WITH_AS(check_allgather_counts(std::vector<int64_t>{1, f32, -4, f32}, "x"),
                       "x: rank 1 announced -4 elements", collective_error);
  constexpr auto big = std::numeric_limits<int64_t>::max();
  // Each count alone fits; their sum in bytes does not.
  CHECK_THROWS_WITH_AS(check_allgather_counts(std::vector<int64_t>{big, f64, big, f64}, "x"),
                       doctest::Contains("x: rank 0 announced"), collective_error);
  CHECK_THROWS_WITH_AS(check_alltoall_counts(std::vector<int64_t>{1, f32, 1, f32, big, f32},
                                             dtype::float32, 2, "x"),
                       doctest::Contains("x: rank 2 announced"), collective_error);
  try {
    check_allgather_counts(std::vector<int64_t>{1, f32, -4, f32}, "x");
  } catch (const collective_error& e) {
    CHECK(e.peer() == 1);
  }
}

TEST_CASE("a table that is not two words per rank is refused") {
  CHECK_THROWS_AS(check_allgather_counts(std::vector<int64_t>{1, f32, 2}, "x"), collective_error);
}

} // TEST_SUITE
