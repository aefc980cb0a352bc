#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "hvactor/runtime.hpp"
#include "hvactor/settings.hpp"
#include "driver/internal/stop_request.hpp"

namespace hvactor {

/// What hvactor-run starts: PROGRAM on N slots, gang-scheduled like an
/// executor's workers.
struct launch_options {
  /// Slots (world size); with num_hosts it must equal num_hosts * per_host.
  int np = 0;
  std::optional<int> num_hosts;
  std::optional<int> per_host;
  int cpus_per_worker = 1;
  /// GPUs per slot (0: a CPU job).
  int gpus_per_worker = 0;
  /// -x VAR=VALUE, set in every process after the Horovod variables.
  std::map<std::string, std::string> env;
  /// The SPMD program (a path, or a name looked up in PATH) and its args.
  std::string program;
  std::vector<std::string> args;
  /// Also write <dir>/rank.<r>/stdout and stderr.
  std::string output_dir;
  /// Prefix every forwarded line with the time it arrived.
  bool timestamps = false;
  // Elastic jobs (horovodrun's elastic flags): --min-np makes the job
  // elastic; output lines are then tagged with each process's worker id.
  std::optional<int> min_np;
  std::optional<int> max_np;
  std::string discovery_script;
  /// Slots of a discovered host whose line gives none (--slots-per-host).
  int slots_per_host = 1;
  std::optional<int> reset_limit;
  std::optional<std::pair<int, int>> cooldown_range;
  std::optional<int> elastic_timeout;
  /// Nodes to place ranks on first, in this order (Slurm: the allocation's).
  std::vector<std::string> node_order;
};

/// hvactor-run's engine: gang-schedules `np` slots through the same
/// coordinator as hvactor::executor and starts the user's program in each
/// with Horovod's environment (the program calls hvd::init()). Every line a
/// rank writes reaches this process live, prefixed like mpirun
/// --tag-output ("[1,2]<stdout>:..."), one whole line at a time.
class launcher {
public:
  /// Throws std::invalid_argument for inconsistent options and a program
  /// that cannot be found.
  launcher(runtime& rt, settings s, launch_options opts);
  ~launcher();

  launcher(const launcher&) = delete;
  launcher& operator=(const launcher&) = delete;

  /// Runs the job to its end and returns the exit code: 0 when every rank
  /// exited 0; the first failed rank's exit code (128 + signal when killed)
  /// otherwise, after stopping the other ranks; 1 when the job could not
  /// start. A stop requested from another thread (a signal number) stops
  /// every rank on every node and returns 128 + that number.
  int run(stop_request& stop);

  struct impl;

private:
  std::unique_ptr<impl> impl_;
};

} // namespace hvactor
