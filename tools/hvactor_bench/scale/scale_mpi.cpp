// hvactor-bench-scale-mpi: the Open MPI peer of hvactor-bench scale. Every
// rank notes the wall clock (ns since the epoch) when MPI_Init returned;
// rank 0 gathers them and prints one line:
//
//   init_done_ns R0 R1 ...
//
// hvactor-bench scale starts it through mpirun across the same emulated
// nodes and subtracts the moment it started mpirun (one clock for every
// namespace of the machine).

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <vector>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int64_t done = std::chrono::duration_cast<std::chrono::nanoseconds>(
                   std::chrono::system_clock::now().time_since_epoch())
                   .count();
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  std::vector<int64_t> all(static_cast<size_t>(ranks));
  MPI_Gather(&done, 1, MPI_INT64_T, all.data(), 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    std::printf("init_done_ns");
    for (auto t : all)
      std::printf(" %lld", static_cast<long long>(t));
    std::printf("\n");
    std::fflush(stdout);
  }
  MPI_Finalize();
  return 0;
}
