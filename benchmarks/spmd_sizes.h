/* The sizes and call counts both SPMD loops use (spmd_allreduce.cpp and
 * spmd_allreduce_mpi.cpp): the same for both, so that each size is the same
 * number of calls on each side. Plain C, as the MPI loop. */
#ifndef HVACTOR_SPMD_SIZES_H
#define HVACTOR_SPMD_SIZES_H

#include <stdlib.h>

typedef struct {
  size_t min, max, factor;
  int scale; /* every size's calls times this (the loops' 4th argument) */
  int ok;
} spmd_sizes;

/* Calls per size: as Open MPI's and the OSU benchmarks' loops, many for
 * small messages, fewer for large ones (about 0.1-1 s each here). */
static inline int spmd_iters(size_t bytes) {
  if (bytes <= 8192)
    return 2000;
  if (bytes <= (1u << 20))
    return 200;
  if (bytes <= (16u << 20))
    return 40;
  return 10;
}

/* [MIN_BYTES MAX_BYTES FACTOR [CALLS_SCALE]], default 4 B to 64 MiB by 16,
 * each size's calls (spmd_iters) as they are. A scale above 1 makes each
 * size's timed calls span many scheduler ticks: under a load that takes
 * a core for whole 4 ms ticks, a 1 ms run of calls measures whether a
 * tick fell into it rather than the calls. */
static inline spmd_sizes spmd_parse_sizes(int argc, char** argv) {
  spmd_sizes s = {4, 64u << 20, 16, 1, 1};
  if (argc == 4 || argc == 5) {
    s.min = strtoull(argv[1], NULL, 10);
    s.max = strtoull(argv[2], NULL, 10);
    s.factor = strtoull(argv[3], NULL, 10);
    if (argc == 5) {
      long scale = strtol(argv[4], NULL, 10);
      s.scale = scale >= 1 && scale <= 1000 ? (int)scale : 0;
    }
  } else if (argc != 1) {
    s.ok = 0;
  }
  if (s.min < 4 || s.max < s.min || s.max > (1ull << 31) || s.factor < 2 || s.scale < 1)
    s.ok = 0;
  return s;
}

/* The share (percent) of a size's timed run spent in calls of 1 ms or
 * more: under a load, a few calls that waited for a peer without a core
 * set the mean, and this says how much of it they are. */
static inline double spmd_long_share(const double* us, int iters, double total_us) {
  double slow = 0;
  for (int i = 0; i < iters; ++i)
    if (us[i] >= 1000.0)
      slow += us[i];
  return total_us > 0 ? 100.0 * slow / total_us : 0.0;
}

#endif
