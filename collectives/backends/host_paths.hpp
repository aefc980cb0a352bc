#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace hvactor::collectives {

/// What one rank tells the others at hvd::init about where it runs.
struct rank_place {
  /// Id of the node's shared-memory segment this rank mapped; 0: none.
  uint64_t segment = 0;
  /// Ranks the segment has room for.
  int64_t slots = 0;
  int64_t local_rank = 0;
  int64_t local_size = 1;
  int64_t cross_rank = 0;
  int64_t cross_size = 1;
  int64_t pid = 0;
};

/// The settings that pick the paths (read once at hvd::init).
struct path_settings {
  /// HVACTOR_SHM: false forbids shared memory.
  bool shm = true;
  /// HOROVOD_HIERARCHICAL_ALLREDUCE / _ALLGATHER: nullopt automatic, true
  /// forces (where possible), false forbids.
  std::optional<bool> hierarchical_allreduce;
  std::optional<bool> hierarchical_allgather;

  /// "1"/"true" -> true, "0"/"false" -> false, "" -> nullopt; anything else
  /// throws std::invalid_argument naming `variable`.
  static std::optional<bool> parse_switch(std::string_view value, std::string_view variable);
};

/// Which path the host collectives take, decided identically on every
/// rank from every rank's rank_place (a plain policy; no I/O).
///
/// Shared memory is usable when every rank mapped a segment, the ranks
/// that share one segment id are exactly local ranks 0..n-1 with
/// local_size n and fit its slots. Then a job on one node runs
/// allreduce/allgather/broadcast/barrier there; a job on several nodes is
/// hierarchical when each node has the same number n > 1 of ranks and the
/// ranks of each local rank have cross ranks 0..nodes-1 (automatic), or
/// when forced; otherwise everything goes over Gloo, and `why` says why.
struct host_paths {
  bool shm = false;
  bool single_node = false;
  bool hierarchical_allreduce = false;
  bool hierarchical_allgather = false;
  int nodes = 1;
  int local_size = 1;
  /// World ranks of this rank's node by local rank (when shm).
  std::vector<int> local_ranks;
  /// World rank of (cross rank c, local rank l) at c * local_size + l
  /// (when hierarchical).
  std::vector<int> world_of;
  /// Why shared memory or the hierarchical path is not taken ("" if it is).
  std::string why;

  static host_paths plan(std::span<const rank_place> table, int me, const path_settings& s);

  /// The job's rank of each node's rank with local rank `local_rank`, by
  /// cross rank (when hierarchical); `members`: the job's rank of each rank
  /// of the table (a process set's), empty when they are the job's.
  std::vector<int> job_ranks_across(int local_rank, std::span<const int> members) const;
};

} // namespace hvactor::collectives
