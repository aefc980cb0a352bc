// hvactor-bench-mpi: the Open MPI peer of hvactor-bench. A plain MPI program
// that hvactor-bench starts through mpirun once per round, for every size of
// the sweep, between hvactor's own rounds:
//
//   mpirun -np N hvactor-bench-mpi --kind allreduce|allgather|broadcast
//          --sizes B1,B2,.. --iters I1,I2,.. --warmup W1,W2,.. [--check]
//
// MPI_Allreduce(MPI_IN_PLACE, MPI_SUM), MPI_Allgather, MPI_Bcast from rank
// 0, float32, measured as peer_protocol.hpp says.

#include <mpi.h>

#include <vector>

#include "tools/hvactor_bench/peers/peer_protocol.hpp"

using namespace hvactor::bench_tool;

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  auto a = parse_peer_args(argc, argv, 1);
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  for_each_size(a, [&] {
    size_t count = peer_count(a, ranks);
    std::vector<float> in(count, 1.0f), out;
    if (a.kind == "allgather")
      out.resize(count * static_cast<size_t>(ranks));
    auto run = [&] {
      int n = static_cast<int>(count);
      if (a.kind == "allreduce")
        MPI_Allreduce(MPI_IN_PLACE, in.data(), n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      else if (a.kind == "broadcast")
        MPI_Bcast(in.data(), n, MPI_FLOAT, 0, MPI_COMM_WORLD);
      else
        MPI_Allgather(in.data(), n, MPI_FLOAT, out.data(), n, MPI_FLOAT, MPI_COMM_WORLD);
    };
    long long wrong = 0, wrong_total = 0;
    if (a.check) {
      fill_check(in, rank);
      run();
      wrong = count_wrong(a.kind, in, out, count, ranks);
    }
    MPI_Reduce(&wrong, &wrong_total, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    auto timed =
      hvactor::bench::measure_calls(a.warmup, a.iters, run, [] { MPI_Barrier(MPI_COMM_WORLD); });
    double loop_us = timed.loop_us;
    double slowest = 0;
    MPI_Reduce(&loop_us, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0)
      print_point(a, slowest, wrong_total, timed.samples_us);
  });
  MPI_Finalize();
  return 0;
}
