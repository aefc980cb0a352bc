#pragma once

// Reading a Slurm allocation from the environment Slurm gives a job, without
// scontrol (which needs slurm.conf even to expand a host list;
// docs/development/platform-notes.md, "Slurm: scontrol needs a
// configuration"): host lists ("n[1-3],gpu[08-11]") and compressed counts
// ("2(x3),1").

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hvactor::slurm {

/// The most hosts one list may expand to (a bound on what a malformed or
/// hostile variable can make a process allocate).
inline constexpr size_t max_hosts = 65536;
/// Per-node bounds on what an allocation may say (far above any machine's;
/// they keep every product of counts well inside an int).
inline constexpr int max_tasks_per_node = 4096;
inline constexpr int max_cpus_per_node = 65536;
inline constexpr int max_gpus_per_node = 1024;
/// The most ranks an allocation may imply (SLURM_NTASKS, the tasks per node
/// summed, or GPUs x nodes).
inline constexpr long long max_ranks = 1 << 20;
/// The longest job id accepted (Slurm's are 32-bit numbers, "N_M" for an
/// array task, "N+M" for a heterogeneous component).
inline constexpr size_t max_job_id_length = 32;

/// Refuses a job id that is not Slurm's form: digits, optionally followed
/// by "_DIGITS" (array task) or "+DIGITS" (heterogeneous component). It
/// names directories, so nothing else is accepted. Throws
/// std::invalid_argument naming `variable` and the value.
void validate_job_id(std::string_view value, std::string_view variable);

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
  /// GPUs per node (SLURM_GPUS_ON_NODE, else the count of SLURM_JOB_GPUS),
  /// 0 without GPUs.
  int gpus_per_node = 0;
  /// The variable gpus_per_node came from, for messages.
  std::string gpus_variable = "SLURM_GPUS_ON_NODE";

  /// The number of ranks when -np is not given: SLURM_NTASKS, else the
  /// tasks per node summed, else GPUs x nodes, else one per node. Counted
  /// in 64 bits; throws std::invalid_argument naming the variables when it
  /// exceeds max_ranks.
  int default_ranks() const;
};

/// The allocation this process runs in (SLURM_JOB_ID and SLURM_JOB_NODELIST
/// set), else nullopt when SLURM_JOB_ID is unset. Every value is checked
/// before it names a path or an argument: the job id (validate_job_id),
/// each node name (a node id: A-Z a-z 0-9 . _ -, at most 64 characters),
/// counts within the bounds above, SLURM_TASKS_PER_NODE and
/// SLURM_JOB_CPUS_PER_NODE covering exactly the node list, SLURM_NTASKS at
/// least 1. SLURM_JOB_ID set without SLURM_JOB_NODELIST is refused (not
/// taken for "no allocation"). Throws std::invalid_argument naming the
/// variable and its value.
std::optional<allocation> allocation_from_env();

} // namespace hvactor::slurm
