#pragma once

// One round of the negotiation header's exchange (doubling.hpp) among n
// in-process ranks, checked the same way whatever carries it: Gloo's
// ordinary pairs (doubling_test) or the small-message lane
// (small_lane_test).

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include <doctest/doctest.h>

#include "collectives/backends/gloo/doubling.hpp"
#include "in_process_ranks.hpp"

namespace hvactor::test {

/// Rank r sends header {10 - r, r, 0 or -1, 7, -r} (word 2 the data word)
/// and three floats, except rank `alone` (-1: none), which sends its header
/// without data. `exchange(r, header, data or nullptr, frame)` runs rank
/// r's exchange. Every rank must get the min-reduced header and a frame of
/// header_frame_bytes; when every rank sent data, the same bits on every
/// rank, the data summed.
template <class Exchange>
void check_header_exchange(int n, int alone, Exchange exchange) {
  constexpr size_t words = 5;
  std::vector<std::vector<int64_t>> headers(static_cast<size_t>(n));
  std::vector<std::vector<float>> data(static_cast<size_t>(n));
  std::vector<std::vector<std::byte>> frames(static_cast<size_t>(n));
  on_every_rank(n, [&](int r) {
    auto i = static_cast<size_t>(r);
    headers[i] = {10 - r, r, r == alone ? -1 : 0, 7, -r};
    data[i] = {1.0f + static_cast<float>(r), 0.5f * static_cast<float>(r), 3.0f};
    exchange(r, headers[i], r == alone ? nullptr : &data[i], frames[i]);
  });
  const int64_t carried = alone < 0 ? 0 : -1;
  for (int r = 0; r < n; ++r) {
    CAPTURE(r);
    auto i = static_cast<size_t>(r);
    CHECK(headers[i] == std::vector<int64_t>{10 - (n - 1), 0, carried, 7, -(n - 1)});
    // The header's words and header_data_bytes more.
    CHECK(frames[i].size() == collectives::header_frame_bytes(words));
    if (alone >= 0)
      continue; // the data is not every rank's: reduced header[data_word] -1 says so
    // Every rank's data, the same bits on every rank.
    CHECK(std::memcmp(frames[i].data(), frames[0].data(), frames[0].size()) == 0);
    float got[3];
    std::memcpy(got, frames[i].data() + words * sizeof(int64_t), sizeof got);
    CHECK(got[0] == doctest::Approx(n + n * (n - 1) / 2.0));
    CHECK(got[1] == doctest::Approx(0.25 * n * (n - 1)));
    CHECK(got[2] == doctest::Approx(3.0 * n));
  }
}

} // namespace hvactor::test
