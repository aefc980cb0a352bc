/* spmd_allreduce.cpp's loop, call for call, over MPI_Allreduce (in place,
 * float sum): fill, one warm-up call, a barrier, `iters` timed calls.
 * Plain C (compiled as C++ with the project's MPI target), as the loop
 * users compare with.
 *
 *   mpirun -np 2 spmd_allreduce_mpi [MIN_BYTES MAX_BYTES FACTOR] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "spmd_sizes.h"

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int by_value(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

int main(int argc, char** argv) {
  spmd_sizes sizes = spmd_parse_sizes(argc, argv);
  if (!sizes.ok) {
    fprintf(stderr, "usage: spmd_allreduce_mpi [MIN_BYTES MAX_BYTES FACTOR [CALLS_SCALE]] "
                    "(sizes >= 4, scale 1-1000)\n");
    return 2;
  }
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  for (size_t bytes = sizes.min; bytes <= sizes.max; bytes *= sizes.factor) {
    size_t n = bytes / sizeof(float);
    float* x = (float*)malloc(bytes);
    int iters = spmd_iters(bytes) * sizes.scale;
    double* us = (double*)malloc(sizeof(double) * (size_t)iters);
    if (!x || !us) {
      fprintf(stderr, "spmd_allreduce_mpi: out of memory at %zu bytes\n", bytes);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (size_t i = 0; i < n; ++i)
      x[i] = 1.0f;
    MPI_Allreduce(MPI_IN_PLACE, x, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    double begin = now_us();
    for (int i = 0; i < iters; ++i) {
      double t = now_us();
      MPI_Allreduce(MPI_IN_PLACE, x, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      us[i] = now_us() - t;
    }
    double total = now_us() - begin;
    double mean = total / iters;
    double slow = spmd_long_share(us, iters, total);
    qsort(us, (size_t)iters, sizeof(double), by_value);
    if (rank == 0)
      printf("%zu %d %.3f %.3f %.3f %.1f\n", bytes, iters, mean, us[iters / 2],
             us[iters * 99 / 100], slow);
    fflush(stdout);
    free(us);
    free(x);
  }
  MPI_Finalize();
  return 0;
}
