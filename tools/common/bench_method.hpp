#pragma once

// The measurement method of hvactor's benchmarks, one place for
// hvactor-bench (its collectives and its peers: Open MPI, raw Gloo; the
// torch.distributed script mirrors it) and for benchmarks/
// (docs/development/platform-notes.md, "Collectives: benchmark method"):
//
//   per size: with a check, one call on data whose result is known
//   (fill_check/count_wrong); warm-up calls; a barrier; one more call (it
//   absorbs the barrier's skew) where the caller says so; then `iters`
//   timed calls, the same count on every rank (iterations() derives it from
//   a time budget where the caller has no fixed count). time_us is the
//   slowest rank's loop time / iters; per-call samples give the medians and
//   spreads (quantile, median). Rounds of a scenario report the median over
//   rounds, with quartiles as the spread.
//
// Header-only and free of hvactor, Gloo and MPI, so that the MPI peer (a
// plain MPI program) uses it too.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

namespace hvactor::bench {

using clock_type = std::chrono::steady_clock;

/// Microseconds between two clock readings.
inline double us_between(clock_type::time_point t0, clock_type::time_point t1) {
  return std::chrono::duration<double, std::micro>(t1 - t0).count();
}

// --- Sizes and counts -------------------------------------------------------

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

/// nccl-tests' bus bandwidth factor: 2(n - 1)/n for allreduce, (n - 1)/n
/// for allgather, 1 for broadcast (and for one rank).
inline double bus_factor(const std::string& kind, int ranks) {
  double n = ranks;
  if (kind == "allreduce")
    return n > 1 ? 2 * (n - 1) / n : 1;
  if (kind == "allgather")
    return n > 1 ? (n - 1) / n : 1;
  return 1;
}

// --- The checked call -------------------------------------------------------

/// What rank `rank` contributes at element `i` of the checked call (small
/// integers: every sum is exact in float32).
inline float check_value(int rank, size_t i) {
  return static_cast<float>((rank + 1) * static_cast<int>(i % 7 + 1));
}

/// Fills the input of the checked call.
inline void fill_check(float* data, size_t count, int rank) {
  for (size_t i = 0; i < count; ++i)
    data[i] = check_value(rank, i);
}

/// The same for a whole vector.
inline void fill_check(std::vector<float>& data, int rank) {
  fill_check(data.data(), data.size(), rank);
}

/// Wrong elements after the checked call of `kind` over `ranks` ranks: `in`
/// in place (allreduce, a float sum; broadcast from rank 0) or `out`
/// (allgather, `count` per rank). `first_wrong`, when given, gets the index
/// of the first wrong element.
inline int64_t count_wrong(const std::string& kind, const std::vector<float>& in,
                           const std::vector<float>& out, size_t count, int ranks,
                           size_t* first_wrong = nullptr) {
  int64_t wrong = 0;
  auto tally = [&](bool bad, size_t i) {
    if (bad && wrong++ == 0 && first_wrong)
      *first_wrong = i;
  };
  if (kind == "allreduce") {
    for (size_t i = 0; i < in.size(); ++i)
      tally(in[i] != static_cast<float>(ranks * (ranks + 1) / 2 * static_cast<int>(i % 7 + 1)),
            i);
  } else if (kind == "broadcast") {
    for (size_t i = 0; i < in.size(); ++i)
      tally(in[i] != check_value(0, i), i);
  } else {
    wrong += static_cast<int64_t>(out.size() != count * static_cast<size_t>(ranks));
    for (size_t i = 0; i < out.size() && count > 0; ++i)
      tally(out[i] != check_value(static_cast<int>(i / count), i % count), i);
  }
  return wrong;
}

// --- The timed loop ---------------------------------------------------------

/// `n` untimed calls.
template <class Run>
void warm_up(int n, Run&& run) {
  for (int i = 0; i < n; ++i)
    run();
}

/// What timed_calls measured on this rank.
struct timed {
  /// Wall time of the whole loop, microseconds.
  double loop_us = 0;
  /// Each call's time, microseconds, in order.
  std::vector<double> samples_us;
};

/// `iters` back-to-back calls of `run`, each timed (one clock reading per
/// call: the samples add up to the loop time).
template <class Run>
timed timed_calls(int iters, Run&& run) {
  timed out;
  out.samples_us.reserve(static_cast<size_t>(std::max(iters, 0)));
  auto start = clock_type::now();
  auto t0 = start;
  for (int i = 0; i < iters; ++i) {
    run();
    auto t1 = clock_type::now();
    out.samples_us.push_back(us_between(t0, t1));
    t0 = t1;
  }
  out.loop_us = us_between(start, t0);
  return out;
}

/// The whole method after the check: `warmup` calls, `barrier()`, one more
/// call, then `iters` timed calls.
template <class Run, class Barrier>
timed measure_calls(int warmup, int iters, Run&& run, Barrier&& barrier) {
  warm_up(warmup, run);
  barrier();
  run();
  return timed_calls(iters, run);
}

// --- Reporting --------------------------------------------------------------

/// Mean of `v` (0 when empty).
inline double mean(const std::vector<double>& v) {
  return v.empty() ? 0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

/// Half width of the 95 % interval of the samples, as Horovod's synthetic
/// benchmark reports it (1.96 standard deviations).
inline double ci95(const std::vector<double>& v) {
  if (v.size() < 2)
    return 0;
  double m = mean(v), ss = 0;
  for (double x : v)
    ss += (x - m) * (x - m);
  return 1.96 * std::sqrt(ss / static_cast<double>(v.size() - 1));
}

/// The q-quantile (0..1) of `v`, nearest rank below; 0 when empty.
inline double quantile(std::vector<double> v, double q) {
  if (v.empty())
    return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1))];
}

/// The q-quantile (0..1) of `v`, the nearest rank rounded (the timeline
/// scenario's rounds); 0 when empty.
inline double quantile_rounded(std::vector<double> v, double q) {
  if (v.empty())
    return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5)];
}

/// The median of `v`: the middle value, the mean of the two middle ones for
/// an even count; `empty` when there is none.
inline double median(std::vector<double> v, double empty = 0) {
  if (v.empty())
    return empty;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/// The upper median: v[n/2] of the sorted values (a value that occurred);
/// 0 when empty.
inline double upper_median(std::vector<double> v) {
  if (v.empty())
    return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

} // namespace hvactor::bench
