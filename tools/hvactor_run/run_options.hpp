#pragma once

// hvactor-run's command line: its options (horovodrun's and mpirun's
// spellings) read into what main() hands off.

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <cxxopts.hpp>

#include "driver/internal/launcher.hpp"
#include "tools/cluster/slurm_env.hpp"

namespace hvactor::run_tool {

/// What hvactor-run was asked to do.
struct run_request {
  launch_options launch;
  /// The Slurm allocation hvactor-run starts its own cluster in, if any.
  std::optional<slurm::allocation> allocation;
  /// --driver: run the program once as an executor-API driver.
  bool driver = false;
  /// --timeout: placement, every rank's start, every node's join.
  std::chrono::seconds timeout{30};
  /// --bind: the Slurm head's address (empty: chosen).
  std::string bind;
  /// The runtime's own options, "hvactor-run" first (--address, --tls-*,
  /// --num-cpus, --insecure).
  std::vector<std::string> runtime_args;
};

/// argv split at "--": ours (mpirun's "-np" and horovodrun's
/// "--blacklist-cooldown-range LOWER UPPER" made readable to cxxopts),
/// argv[0] first, and the program's.
std::pair<std::vector<std::string>, std::vector<std::string>> split_at_dashes(int argc,
                                                                              char** argv);

/// Declares every option of hvactor-run on `parser`.
void declare_run_options(cxxopts::Options& parser);

/// The request `res` and `program` (the words after "--") make. Throws
/// std::invalid_argument naming the option and what it must be.
run_request read_run_options(const cxxopts::ParseResult& res, std::vector<std::string> program);

} // namespace hvactor::run_tool
