// The SPMD path users run, timed as Open MPI's benchmark loop does: for
// each size, fill the buffer, one warm-up call, a barrier, then `iters`
// synchronous in-place float sums, each timed. Rank 0 prints one line per
// size: "SIZE ITERS MEAN_US P50_US P99_US LONG_PCT" (LONG_PCT: the share of
// the run in calls of 1 ms or more). spmd_allreduce_mpi.cpp is the same
// loop, call for call, over MPI_Allreduce; spmd_compare.py runs both in interleaved rounds.
//
//   hvactor-run -np 2 -- spmd_allreduce [MIN_BYTES MAX_BYTES FACTOR]

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <vector>

#include <hvactor/hvactor.hpp>

#include "spmd_sizes.h"

namespace hvd = hvactor::hvd;

int main(int argc, char** argv) {
  spmd_sizes sizes = spmd_parse_sizes(argc, argv);
  if (!sizes.ok) {
    std::fprintf(stderr, "usage: spmd_allreduce [MIN_BYTES MAX_BYTES FACTOR [CALLS_SCALE]] (sizes >= 4, scale 1-1000)\n");
    return 2;
  }
  hvd::init();
  using clock = std::chrono::steady_clock;
  for (size_t bytes = sizes.min; bytes <= sizes.max; bytes *= sizes.factor) {
    std::vector<float> x(bytes / sizeof(float));
    std::fill(x.begin(), x.end(), 1.0f);
    hvd::allreduce(std::span<float>(x), hvd::op::sum);
    hvd::barrier();
    int iters = spmd_iters(bytes) * sizes.scale;
    std::vector<double> us(static_cast<size_t>(iters));
    auto begin = clock::now();
    for (int i = 0; i < iters; ++i) {
      auto t = clock::now();
      hvd::allreduce(std::span<float>(x), hvd::op::sum);
      us[static_cast<size_t>(i)] = std::chrono::duration<double, std::micro>(clock::now() - t).count();
    }
    double total = std::chrono::duration<double, std::micro>(clock::now() - begin).count();
    double mean = total / iters;
    double slow = spmd_long_share(us.data(), iters, total);
    std::nth_element(us.begin(), us.begin() + iters / 2, us.end());
    double p50 = us[static_cast<size_t>(iters / 2)];
    std::nth_element(us.begin(), us.begin() + iters * 99 / 100, us.end());
    double p99 = us[static_cast<size_t>(iters * 99 / 100)];
    if (hvd::rank() == 0)
      std::printf("%zu %d %.3f %.3f %.3f %.1f\n", bytes, iters, mean, p50, p99, slow);
    std::fflush(stdout);
  }
  hvd::shutdown();
  return 0;
}
