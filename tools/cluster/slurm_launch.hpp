#pragma once

// What hvactor-run takes from a Slurm allocation: whether it runs in one
// (--launcher), and the launch's defaults from it
// (docs/development/platform-notes.md, "Slurm: hvactor-run inside an
// allocation").

#include <optional>
#include <string>

#include "driver/internal/launcher.hpp"
#include "tools/cluster/slurm_env.hpp"

namespace hvactor::cluster {

/// The allocation hvactor-run starts its cluster in, or nullopt: with
/// `launcher` "slurm", or "auto" without an address (`has_address`: --address
/// or HVACTOR_ADDRESS), the one in the environment
/// (slurm::allocation_from_env). Throws std::invalid_argument for a
/// --launcher that is not auto, local or slurm; "slurm" outside an
/// allocation; an allocation with an address; `driver` without one.
std::optional<slurm::allocation> allocation_to_launch(const std::string& launcher,
                                                      bool has_address, bool driver);

/// Fills what the command line left open: with no -np, --num-hosts nor
/// --min-np, one rank per task (--num-hosts N --per-host T when every node
/// has T tasks; else SLURM_NTASKS, else GPUs x nodes, else one per node,
/// packed); -np equal to nodes x tasks per node places T per node too. With
/// GPUs allocated and no --gpus-per-worker, each rank reserves one GPU.
void apply_allocation(const slurm::allocation& alloc, launch_options& o, bool gpus_given);

} // namespace hvactor::cluster
