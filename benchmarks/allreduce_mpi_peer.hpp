#pragma once

// Driver side of the allreduce benchmark's Open MPI peer: starts
// `mpirun ... allreduce_mpi` (benchmarks/allreduce_mpi.cpp) and collects its
// "size time_us p50_us" lines.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace hvactor::bench {

/// One size measured by the MPI peer.
struct mpi_point {
  /// Slowest rank's loop time / iterations, microseconds.
  double time_us = 0;
  /// Rank 0's per-call median, microseconds.
  double p50_us = 0;
};

/// What one mpirun produced.
struct mpi_sweep {
  std::map<uint64_t, mpi_point> points;
  /// Wrong sums it reported, and why it failed (cannot start, nonzero exit,
  /// killed after the time limit); empty when all went well.
  std::vector<std::string> errors;
};

/// How to run the peer.
struct mpi_request {
  std::string mpirun;
  std::string program;
  int ranks = 2;
  /// Force the TCP BTL on loopback instead of Open MPI's default (shared
  /// memory between processes of one node).
  bool tcp = false;
  size_t min_bytes = 4;
  size_t max_bytes = size_t{256} << 20;
  double budget_ms = 500;
  /// mpirun's whole process group is killed after this long.
  std::chrono::seconds limit{600};
};

/// The command line run_mpi_peer() starts (for the report).
std::vector<std::string> mpi_command(const mpi_request& req);

/// Runs the peer to the end (or until `req.limit`) and reaps it. Its stderr
/// goes to ours; never throws for a failing peer (see mpi_sweep::errors).
mpi_sweep run_mpi_peer(const mpi_request& req);

} // namespace hvactor::bench
