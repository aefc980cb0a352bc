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
/// and `count` floats (3 by default; more than header_data_bytes only over
/// the lane), except rank `alone` (-1: none), which sends its header
/// without data. `exchange(r, header, data or nullptr, frame)` runs rank
/// r's exchange. Every rank must get the min-reduced header and a frame of
/// header_frame_bytes; when every rank sent data, the same bits on every
/// rank, the data summed (exactly: small integers).
template <class Exchange>
void check_header_exchange(int n, int alone, Exchange exchange, size_t count = 3) {
  constexpr size_t words = 5;
  std::vector<std::vector<int64_t>> headers(static_cast<size_t>(n));
  std::vector<std::vector<float>> data(static_cast<size_t>(n));
  std::vector<std::vector<std::byte>> frames(static_cast<size_t>(n));
  auto value = [](int r, size_t j) {
    return static_cast<float>(r + 1) * static_cast<float>(j % 7);
  };
  on_every_rank(n, [&](int r) {
    auto i = static_cast<size_t>(r);
    headers[i] = {10 - r, r, r == alone ? -1 : 0, 7, -r};
    data[i].resize(count);
    for (size_t j = 0; j < count; ++j)
      data[i][j] = value(r, j);
    exchange(r, headers[i], r == alone ? nullptr : &data[i], frames[i]);
  });
  const int64_t carried = alone < 0 ? 0 : -1;
  for (int r = 0; r < n; ++r) {
    CAPTURE(r);
    auto i = static_cast<size_t>(r);
    CHECK(headers[i] == std::vector<int64_t>{10 - (n - 1), 0, carried, 7, -(n - 1)});
    // The header's words and header_data_bytes more (or the data's bytes
    // where more; the rank alone sent none).
    CHECK(frames[i].size()
          == collectives::header_frame_bytes(words, r == alone ? 0 : count * sizeof(float)));
    if (alone >= 0)
      continue; // the data is not every rank's: reduced header[data_word] -1 says so
    // Every rank's data, the same bits on every rank.
    CHECK(std::memcmp(frames[i].data(), frames[0].data(), frames[0].size()) == 0);
    std::vector<float> got(count);
    std::memcpy(got.data(), frames[i].data() + words * sizeof(int64_t), count * sizeof(float));
    size_t wrong = 0;
    for (size_t j = 0; j < count; ++j)
      if (got[j] != static_cast<float>(n * (n + 1) / 2) * static_cast<float>(j % 7))
        ++wrong;
    CHECK(wrong == 0);
  }
}

} // namespace hvactor::test
