#pragma once

// The measurement method of the allreduce benchmark's scenarios (the same
// as hvactor-bench's peer_method.hpp; notes/collectives.md, section 2):
//
//   per size: one call checked for correctness (rank r contributes r + 1, so
//   every element must come back as n(n + 1)/2), one warm-up call, a
//   barrier, then `iterations(bytes, budget)` timed calls, the same count on
//   every rank. time_us is the slowest rank's loop time / iterations; the
//   per-call p50 of rank 0 is the latency figure.
//
// Header-only and free of hvactor.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace hvactor::bench {

using clock_type = std::chrono::steady_clock;

/// Microseconds between two clock readings.
inline double us_between(clock_type::time_point t0, clock_type::time_point t1) {
  return std::chrono::duration<double, std::micro>(t1 - t0).count();
}

/// Message sizes in bytes: powers of 4 from `min_bytes` up to `max_bytes`
/// (both rounded to a multiple of sizeof(float), at least 4 B).
inline std::vector<size_t> message_sizes(size_t min_bytes, size_t max_bytes) {
  std::vector<size_t> out;
  size_t bytes = 4;
  while (bytes < min_bytes)
    bytes *= 4;
  for (; bytes <= max_bytes; bytes *= 4)
    out.push_back(bytes);
  return out;
}

/// Timed calls per size: the time budget divided by a rough cost model
/// (100 us + bytes at 0.3 GB/s), clamped to [3, 1000]. Deterministic, so
/// every rank of every implementation computes the same count.
inline int iterations(size_t bytes, double budget_ms) {
  double estimate_s = 100e-6 + static_cast<double>(bytes) / 0.3e9;
  double n = (budget_ms / 1000.0) / estimate_s;
  return static_cast<int>(std::clamp(n, 3.0, 1000.0));
}

/// The p-quantile (0..1) of `v`, nearest rank below; 0 when empty.
inline double percentile(std::vector<double> v, double p) {
  if (v.empty())
    return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(p * static_cast<double>(v.size() - 1))];
}

/// Fills `data` with what rank `rank` contributes to the checked call.
inline void fill_for_check(float* data, size_t count, int rank) {
  std::fill(data, data + count, static_cast<float>(rank + 1));
}

/// Empty when every element of `data` is the sum over `ranks` ranks of the
/// values fill_for_check() wrote; otherwise a message naming the first bad
/// element and the number of bad elements.
inline std::string check_sum(const float* data, size_t count, int ranks) {
  const float expected = static_cast<float>(ranks * (ranks + 1) / 2);
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < count; ++i)
    if (data[i] != expected && bad++ == 0)
      first = i;
  if (bad == 0)
    return {};
  return "element " + std::to_string(first) + " is " + std::to_string(data[first])
         + ", expected " + std::to_string(expected) + " (" + std::to_string(bad) + " of "
         + std::to_string(count) + " elements wrong)";
}

/// nccl-tests' bus bandwidth factor for allreduce: 2(n - 1)/n.
inline double allreduce_bus_factor(int ranks) {
  return 2.0 * (ranks - 1) / ranks;
}

/// One rank's measurement of one size.
struct timing {
  /// Wall time of the whole timed loop, microseconds.
  double loop_us = 0;
  /// Timed calls (iterations()).
  int32_t iters = 0;
  /// Median of this rank's per-call times, microseconds.
  double p50_us = 0;
  /// Empty, or what the checked call got wrong.
  std::string error;
};

/// Measures one size on this rank: `reduce(data, count)` is an in-place
/// float sum allreduce, `barrier()` a barrier of the same ranks. Every rank
/// must call it with the same `count` and `budget_ms`.
template <class Reduce, class Barrier>
timing measure(Reduce&& reduce, Barrier&& barrier, float* data, size_t count, int rank,
               int ranks, double budget_ms) {
  timing out;
  fill_for_check(data, count, rank);
  reduce(data, count);
  out.error = check_sum(data, count, ranks);
  reduce(data, count); // warm-up
  out.iters = iterations(count * sizeof(float), budget_ms);
  std::vector<double> per_call;
  per_call.reserve(static_cast<size_t>(out.iters));
  barrier();
  auto start = clock_type::now();
  auto t0 = start;
  for (int i = 0; i < out.iters; ++i) {
    reduce(data, count);
    auto t1 = clock_type::now();
    per_call.push_back(us_between(t0, t1));
    t0 = t1;
  }
  out.loop_us = us_between(start, t0);
  out.p50_us = percentile(std::move(per_call), 0.5);
  return out;
}

} // namespace hvactor::bench
