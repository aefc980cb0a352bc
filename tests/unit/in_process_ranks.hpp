#pragma once

// Unit tests of Gloo algorithms with n ranks in one process: each rank's
// part runs on a thread of its own.

#include <chrono>
#include <future>
#include <vector>

#include <doctest/doctest.h>

namespace hvactor::test {

/// Runs body(rank) for ranks 0..n-1 at once and waits for all (15 s each);
/// the first exception of a rank is rethrown.
template <class Body>
void on_every_rank(int n, Body body) {
  std::vector<std::future<void>> done;
  for (int r = 0; r < n; ++r)
    done.push_back(std::async(std::launch::async, body, r));
  for (auto& d : done) {
    REQUIRE(d.wait_for(std::chrono::seconds{15}) == std::future_status::ready);
    d.get();
  }
}

} // namespace hvactor::test
