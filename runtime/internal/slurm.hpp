#pragma once

// Reading a Slurm allocation from the environment Slurm gives a job, without
// scontrol (which needs slurm.conf even to expand a host list; notes/slurm.md
// 1.7): host lists ("n[1-3],gpu[08-11]") and compressed counts ("2(x3),1").

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hvactor::slurm {

/// The most hosts one list may expand to (a bound on what a malformed or
/// hostile variable can make a process allocate).
inline constexpr size_t max_hosts = 65536;

/// Expands a Slurm host list as `scontrol show hostnames` does:
/// comma-separated entries, each literal text with bracketed ranges
/// ("n[1-3,7]", zero padding kept: "node[001-003]"), several brackets
/// multiply ("c[1-2]n[3-4]" -> c1n3 c1n4 c2n3 c2n4). Text after the last
/// bracket of an entry is refused, as Slurm does. Throws
/// std::invalid_argument "Invalid hostlist: <list> (<why>)".
std::vector<std::string> expand_hostlist(std::string_view list);

/// Expands a compressed count list: "2(x3),1" -> {2, 2, 2, 1}. Throws
/// std::invalid_argument naming `variable` and the value.
std::vector<int> expand_counts(std::string_view list, std::string_view variable);

/// What hvactor-run needs from an allocation.
struct allocation {
  std::string job_id;
  /// Node names (Slurm's NodeName, not necessarily hostnames), in order.
  std::vector<std::string> nodes;
  /// CPUs allocated on each node (SLURM_JOB_CPUS_PER_NODE).
  std::vector<int> cpus;
  /// SLURM_NTASKS when the user asked for a number of tasks.
  std::optional<int> ntasks;
  /// Tasks per node (SLURM_TASKS_PER_NODE), when known.
  std::vector<int> tasks_per_node;
  /// GPUs per node (SLURM_GPUS_ON_NODE / SLURM_GPUS_PER_NODE / the count of
  /// SLURM_JOB_GPUS), 0 without GPUs.
  int gpus_per_node = 0;

  /// The number of ranks when -np is not given: SLURM_NTASKS, else the
  /// tasks per node summed, else GPUs x nodes, else one per node.
  int default_ranks() const;
};

/// The allocation this process runs in (SLURM_JOB_ID and SLURM_JOB_NODELIST
/// set), else nullopt. Throws std::invalid_argument for malformed values,
/// naming the variable.
std::optional<allocation> allocation_from_env();

} // namespace hvactor::slurm
