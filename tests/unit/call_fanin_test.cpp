// call_fanin: when a call is answered, with what, and in which order.

#include <algorithm>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "actors/coordinator/call_fanin.hpp"
#include "base/internal/caf_error.hpp"

using namespace std::chrono_literals;
using hvactor::call_fanin;
using next = hvactor::call_fanin::next;

namespace {

std::vector<char> bytes(const std::string& s) {
  return {s.begin(), s.end()};
}

caf::error failure(const std::string& text, int rank) {
  return hvactor::make_error(hvactor::error_kind::worker_error, text, rank);
}

} // namespace

TEST_SUITE("call_fanin") {

TEST_CASE("a call is answered once every slot answered, in slot order whatever the arrival "
          "order") {
  std::mt19937 rng{7};
  for (int trial = 0; trial < 50; ++trial) {
    call_fanin f{250ms};
    size_t n = 1 + rng() % 9;
    f.open(1, n);
    std::vector<size_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    for (size_t i = 0; i < n; ++i) {
      auto step = f.on_result(1, order[i], bytes("r" + std::to_string(order[i])));
      CHECK(step == (i + 1 == n ? next::answer : next::wait));
    }
    auto results = f.take_results(1);
    REQUIRE(results.size() == n);
    for (size_t r = 0; r < n; ++r)
      CHECK(results[r] == bytes("r" + std::to_string(r)));
    CHECK(f.open_calls() == 0);
  }
}

TEST_CASE("the first failure is held for the grace period; later answers and failures of that "
          "call are ignored") {
  call_fanin f{250ms};
  CHECK(f.grace() == 250ms);
  f.open(7, 3);
  CHECK(f.on_result(7, 0, bytes("a")) == next::wait);
  CHECK(f.on_error(7, failure("rank 1 raised", 1)) == next::hold_error);
  CHECK(f.on_error(7, failure("rank 2 raised", 2)) == next::ignore);
  CHECK(f.on_result(7, 2, bytes("c")) == next::ignore);
  auto err = f.take_error(7);
  REQUIRE(static_cast<bool>(err));
  CHECK(hvactor::describe(err) == "rank 1 raised");
  CHECK(f.open_calls() == 0);
  CHECK_FALSE(static_cast<bool>(f.take_error(7))); // answered once only
}

TEST_CASE("a job failure closes every open call, and a held error whose grace passes later "
          "answers nothing") {
  call_fanin f{250ms};
  f.open(1, 2);
  f.open(2, 1);
  f.open(3, 4);
  CHECK(f.on_error(3, failure("peer broke", 0)) == next::hold_error);
  auto ids = f.close_all();
  std::sort(ids.begin(), ids.end());
  CHECK(ids == std::vector<uint64_t>{1, 2, 3});
  CHECK(f.open_calls() == 0);
  CHECK_FALSE(static_cast<bool>(f.take_error(3)));
  CHECK(f.on_result(1, 0, bytes("late")) == next::ignore);
}

TEST_CASE("answers for unknown calls, foreign slots and duplicate slots are ignored") {
  call_fanin f{1ms};
  CHECK(f.on_result(99, 0, bytes("x")) == next::ignore);
  CHECK(f.on_error(99, failure("x", 0)) == next::ignore);
  f.open(1, 2);
  CHECK(f.on_result(1, 5, bytes("x")) == next::ignore);
  CHECK(f.on_result(1, 0, bytes("a")) == next::wait);
  CHECK(f.on_result(1, 0, bytes("again")) == next::ignore);
  CHECK(f.on_result(1, 1, bytes("b")) == next::answer);
  CHECK(f.take_results(1) == std::vector<std::vector<char>>{bytes("a"), bytes("b")});
}

TEST_CASE("calls in flight are independent") {
  call_fanin f{250ms};
  f.open(1, 2);
  f.open(2, 2);
  CHECK(f.on_error(1, failure("one", 0)) == next::hold_error);
  CHECK(f.on_result(2, 1, bytes("b")) == next::wait);
  CHECK(f.on_result(2, 0, bytes("a")) == next::answer);
  CHECK(f.take_results(2).size() == 2);
  CHECK(hvactor::describe(f.take_error(1)) == "one");
}

TEST_CASE("misuse is refused: zero slots, an id opened twice, results of an incomplete call") {
  call_fanin f{250ms};
  CHECK_THROWS_AS(f.open(1, 0), std::invalid_argument);
  f.open(1, 2);
  CHECK_THROWS_AS(f.open(1, 1), std::logic_error);
  CHECK_THROWS_AS(f.take_results(1), std::logic_error);
}

} // TEST_SUITE
