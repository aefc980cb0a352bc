// usage_pacer (actors/board/usage_pacer.hpp): a colocator sends its
// workers' usage to the dashboard only when it changed visibly, and looks
// less often while it does not.

#include "actors/board/usage_pacer.hpp"

#include <doctest/doctest.h>

using hvactor::detail::usage_pacer;
using namespace hvactor::proto;
using std::chrono::milliseconds;

namespace {

rank_stats sample(std::vector<rank_stat> ranks) {
  return rank_stats{std::move(ranks)};
}

} // namespace

TEST_SUITE("usage pacer") {

TEST_CASE("the first sample goes out, and idle samples back off to the longest wait") {
  usage_pacer p;
  CHECK(p.take(sample({{0, 1.0, 100u << 20}})));
  CHECK(p.next_wait() == board_limits::sample_interval);
  std::vector<milliseconds> waits;
  for (int i = 0; i < 8; ++i) {
    // An idle worker: a millisecond of CPU, a few pages, each time.
    CHECK_FALSE(p.take(sample({{0, 1.0 + 0.001 * i, (100u << 20) + 4096u * i}})));
    waits.push_back(p.next_wait());
  }
  CHECK(waits.front() == 2 * board_limits::sample_interval);
  for (size_t i = 1; i < waits.size(); ++i)
    CHECK(waits[i] >= waits[i - 1]);
  CHECK(waits.back() == board_limits::max_sample_interval);
}

TEST_CASE("a visible change in CPU or memory goes out and brings the short wait back") {
  usage_pacer p;
  p.take(sample({{0, 1.0, 100u << 20}, {1, 2.0, 100u << 20}}));
  for (int i = 0; i < 5; ++i)
    p.take(sample({{0, 1.0, 100u << 20}, {1, 2.0, 100u << 20}}));
  REQUIRE(p.next_wait() == board_limits::max_sample_interval);
  CHECK(p.take(sample({{0, 1.0, 100u << 20}, {1, 2.06, 100u << 20}})));
  CHECK(p.next_wait() == board_limits::sample_interval);
  CHECK_FALSE(p.take(sample({{0, 1.0, 100u << 20}, {1, 2.08, 100u << 20}})));
  CHECK(p.take(sample({{0, 1.0, 98u << 20}, {1, 2.08, 100u << 20}})));
  // Small drifts add up against the last sample sent, not the last read.
  CHECK_FALSE(p.take(sample({{0, 1.03, 98u << 20}, {1, 2.08, 100u << 20}})));
  CHECK(p.take(sample({{0, 1.06, 98u << 20}, {1, 2.08, 100u << 20}})));
}

TEST_CASE("a rank that comes or goes is a change") {
  usage_pacer p;
  p.take(sample({{0, 1.0, 1u << 20}}));
  CHECK(p.take(sample({{0, 1.0, 1u << 20}, {1, 0.0, 1u << 20}})));
  CHECK(p.take(sample({{1, 0.0, 1u << 20}})));
  CHECK(p.take(sample({{2, 0.0, 1u << 20}})));
}

} // TEST_SUITE
