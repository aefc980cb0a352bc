// allreduce_mpi: the Open MPI peer of the allreduce benchmark. A plain MPI
// program, started by `allreduce` through mpirun; it measures
// MPI_Allreduce(MPI_IN_PLACE, float, MPI_SUM) with the same method and sizes
// as the hvactor and raw Gloo paths (allreduce_method.hpp).
//
//   mpirun -np N allreduce_mpi [--min-bytes 4] [--max-bytes 268435456] [--budget-ms 500]
//
// Rank 0 prints one line per size, "size time_us p50_us" (time_us: the
// slowest rank's loop time / iterations), comment lines starting with '#',
// and "error <size> <message>" when the checked call returned a wrong sum.

#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "allreduce_method.hpp"

namespace {

struct flags {
  size_t min_bytes = 4;
  size_t max_bytes = size_t{256} << 20;
  double budget_ms = 500;
};

/// Parses the three flags (`--name value` or `--name=value`); exits with a
/// usage line on anything else.
flags parse(int argc, char** argv) {
  flags out;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::string value;
    if (auto eq = arg.find('='); eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg.resize(eq);
    } else if (i + 1 < argc) {
      value = argv[++i];
    }
    if (arg == "--min-bytes" && !value.empty())
      out.min_bytes = std::strtoull(value.c_str(), nullptr, 10);
    else if (arg == "--max-bytes" && !value.empty())
      out.max_bytes = std::strtoull(value.c_str(), nullptr, 10);
    else if (arg == "--budget-ms" && !value.empty())
      out.budget_ms = std::strtod(value.c_str(), nullptr);
    else {
      std::fprintf(stderr,
                   "usage: allreduce_mpi [--min-bytes B] [--max-bytes B] [--budget-ms MS]\n");
      std::exit(2);
    }
  }
  return out;
}

} // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  auto opts = parse(argc, argv);
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  auto reduce = [](float* data, size_t count) {
    MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                  MPI_COMM_WORLD);
  };
  auto barrier = [] { MPI_Barrier(MPI_COMM_WORLD); };
  if (rank == 0) {
    std::printf("# allreduce_mpi ranks=%d budget_ms=%g\n# size time_us p50_us\n", ranks,
                opts.budget_ms);
    std::fflush(stdout);
  }
  for (size_t bytes : hvactor::bench::message_sizes(opts.min_bytes, opts.max_bytes)) {
    size_t count = bytes / sizeof(float);
    std::vector<float> buf(count);
    auto t = hvactor::bench::measure(reduce, barrier, buf.data(), count, rank, ranks,
                                     opts.budget_ms);
    double per_call_us = t.loop_us / t.iters;
    double slowest_us = 0;
    MPI_Reduce(&per_call_us, &slowest_us, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    // Any rank's wrong sum is reported by rank 0, which prints.
    int bad_rank = t.error.empty() ? ranks : rank;
    int first_bad = ranks;
    MPI_Allreduce(&bad_rank, &first_bad, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (first_bad < ranks) {
      char msg[256] = {0};
      if (rank == first_bad && rank != 0)
        MPI_Send(t.error.c_str(), static_cast<int>(std::min<size_t>(t.error.size(), 200)),
                 MPI_CHAR, 0, 1, MPI_COMM_WORLD);
      if (rank == 0) {
        if (first_bad == 0)
          std::snprintf(msg, sizeof(msg), "%s", t.error.c_str());
        else
          MPI_Recv(msg, sizeof(msg) - 1, MPI_CHAR, first_bad, 1, MPI_COMM_WORLD,
                   MPI_STATUS_IGNORE);
        std::printf("error %zu rank %d: %s\n", bytes, first_bad, msg);
      }
    }
    if (rank == 0) {
      std::printf("%zu %.3f %.3f\n", bytes, slowest_us, t.p50_us);
      std::fflush(stdout);
    }
  }
  MPI_Finalize();
  return 0;
}
