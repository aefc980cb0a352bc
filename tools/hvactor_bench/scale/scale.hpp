#pragma once

// hvactor-bench scale: how long a job takes from executor::start() to
// every rank's hvd::init() done, split into phases, on a cluster of many
// nodes (an emulated one: hvactor-netcluster up --nodes N -- hvactor-bench
// scale --num-hosts N --per-host 1); the memory of the head, the nodes, the
// driver and the workers; the whole cluster's CPU use while the job is
// idle; and Open MPI's job start on the same nodes as the peer (--peer mpi).
//
// Phases of one rank (wall clock, one clock for every emulated node;
// base/internal/start_marks.hpp notes the runtime's moments):
//   placement     start() until every node of the plan is reserved
//   shipping      the driver's binary to the nodes (once per job)
//   process       shipped until the rank's process runs its main()
//   registration  main() until the driver accepted its registration
//                 (actor system, TLS connection, register)
//   wait          registered until its environment arrived (the slowest
//                 rank's registration)
//   dispatch      environment until hvd::init() was called (start()
//                 returns, the call reaches the rank)
//   rendezvous    hvd::init() itself (the store, Gloo's full mesh)

#include <string>
#include <utility>
#include <vector>

#include <hvactor/runtime.hpp>

namespace hvactor::bench_tool {

/// One job start of hvactor, in milliseconds.
struct scale_round {
  int round = 0;
  int ranks = 0;
  bool ok = false;
  /// Why the start failed (its first line), when it failed.
  std::string error;
  /// start() until the last rank's hvd::init() returned; start() alone.
  double total_ms = 0, start_ms = 0;
  /// Once per job (driver side); -1 when not reached.
  double placement_ms = -1, shipping_ms = -1;
  /// What the driver sent the nodes of its binary and libraries (0 when
  /// every node had them cached).
  double shipped_mib = 0;
  /// Per rank, in rank order.
  std::vector<double> process_ms, registration_ms, wait_ms, dispatch_ms, rendezvous_ms;
  /// Resident memory (MiB) after hvd::init(): every rank's; the head's, the
  /// nodes', the driver's.
  std::vector<double> worker_mib, node_mib;
  double head_mib = 0, driver_mib = 0;
};

/// One job start of Open MPI (mpirun across the same nodes), in ms.
struct mpi_round {
  int round = 0;
  bool ok = false;
  std::string error;
  /// mpirun started until the last rank's MPI_Init returned; the median
  /// rank's; mpirun's exit.
  double total_ms = 0, median_ms = 0, exit_ms = 0;
};

/// CPU used while the job's ranks idle after hvd::init(), in percent of
/// one core.
struct scale_idle {
  double seconds = 0;
  double head = 0, nodes = 0, driver = 0, workers = 0, total = 0;
  std::string busiest;
  double busiest_percent = 0;
  /// By role and thread name, busiest first (scale_usage.hpp).
  std::vector<std::pair<std::string, double>> threads;
};

/// `hvactor-bench scale ...` (`args[1]` is "scale"); prints the tables;
/// returns the exit code (1 when a start failed).
int run_scale(hvactor::runtime& rt, const std::vector<std::string>& args);

/// The tables on stdout (scale_report.cpp).
void print_round_header();
void print_round(const scale_round& r);
void print_mpi_round(const mpi_round& r);
void print_summary(const std::vector<scale_round>& rounds, const std::vector<mpi_round>& mpi,
                   const scale_idle* idle);

/// --json: the machine, the settings, every round's per-rank phases, the
/// peer's rounds, memory and idle CPU.
void write_scale_json(const std::string& file, const std::string& settings,
                      const std::vector<scale_round>& rounds, const std::vector<mpi_round>& mpi,
                      const scale_idle* idle);

/// One Open MPI job start across the emulated cluster's first `hosts`
/// nodes, `per_host` ranks each (scale_peer.cpp); never throws for a
/// failed start (ok false, error set).
mpi_round run_mpi_start(int hosts, int per_host, double limit_s);

/// Empty when the mpi peer can run here, else why not.
std::string mpi_start_missing();

} // namespace hvactor::bench_tool
