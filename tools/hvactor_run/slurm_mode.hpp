#pragma once

// What hvactor-run does differently inside a Slurm allocation: the defaults
// of the launch from the allocation, and --driver.

#include <atomic>

#include "internal/launcher.hpp"
#include "internal/slurm.hpp"
#include "slurm_cluster.hpp"

namespace hvactor::run_tool {

/// Fills what the command line left open: with no -np, --num-hosts nor
/// --min-np, one rank per task (--num-hosts N --per-host T when every node
/// has T tasks; else SLURM_NTASKS, else GPUs x nodes, else one per node,
/// packed); -np equal to nodes x tasks per node places T per node too. With
/// GPUs allocated and no --gpus-per-worker, each rank reserves one GPU.
void apply_allocation(const slurm::allocation& alloc, launch_options& o, bool gpus_given);

/// hvactor-run --driver: runs o.program once with HVACTOR_ADDRESS (and the
/// driver's TLS identity) set, its output straight to ours; SIGTERM/SIGINT
/// (`stop`) are passed on. Returns its exit code (128 + signal when
/// killed).
int run_driver(const launch_options& o, const slurm_cluster& cluster, std::atomic<int>& stop);

} // namespace hvactor::run_tool
