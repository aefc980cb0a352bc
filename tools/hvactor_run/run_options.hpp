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
  /// --gloo-timeout-seconds: the collectives' and the control plane's
  /// waits (settings.timeout); default: --timeout.
  std::optional<std::chrono::seconds> gloo_timeout;
  /// --verbose: say what hvactor-run does.
  bool verbose = false;
  /// -H / --hostfile: the machines and their slots, brought up over ssh
  /// for this job (hosts.hpp).
  std::vector<std::pair<std::string, int>> hosts;
  int ssh_port = 22;
  std::string ssh_identity;
};

/// argv split into ours (mpirun's "-np" and horovodrun's
/// "--blacklist-cooldown-range LOWER UPPER" made readable to cxxopts),
/// argv[0] first, and the program's: everything after "--", or, as
/// horovodrun reads its command line, from the first word that is neither
/// one of `parser`'s options nor an option's value ("hvactor-run -np 4
/// python3 train.py --epochs 3").
std::pair<std::vector<std::string>, std::vector<std::string>>
split_at_program(int argc, char** argv, const cxxopts::Options& parser);

/// Declares every option of hvactor-run on `parser`.
void declare_run_options(cxxopts::Options& parser);

/// Parses `words` (argv after argv[0], before "--"); with --config-file,
/// the file's flags are added where the command line has none, and parsed
/// with the rest. Throws std::invalid_argument naming the flag or the
/// file's key.
cxxopts::ParseResult parse_run_options(cxxopts::Options& parser, std::vector<std::string> words);

/// The request `res` and `program` (the words after "--") make. Throws
/// std::invalid_argument naming the option and what it must be.
run_request read_run_options(const cxxopts::ParseResult& res, std::vector<std::string> program);

} // namespace hvactor::run_tool
