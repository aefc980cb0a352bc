#pragma once

// hvactor-bench allreduce | allgather | broadcast: nccl-tests' sweep over
// message sizes through hvd:: in this cluster's workers, each size followed
// by the same size through the --peer programs, with the ratio columns.

#include <string>
#include <vector>

#include <hvactor/hvactor.hpp>

namespace hvactor::bench_tool {

/// args: the runtime's remaining arguments (args[1] is the subcommand).
/// Throws std::invalid_argument for bad options (exit 2), std::runtime_error
/// when a run fails; returns 1 when --check found wrong elements.
int run_sweep(hvactor::runtime& rt, const std::vector<std::string>& args);

} // namespace hvactor::bench_tool
