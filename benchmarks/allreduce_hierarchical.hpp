#pragma once

// allreduce --hierarchical: hierarchical allreduce (shared memory inside a
// node, Gloo across nodes) against flat Gloo over every rank, on a real
// cluster of 2 hvactor-node processes on this machine x 2 workers each.
// The parent starts the cluster and re-runs the benchmark as a driver that
// joins it (--hierarchical-child); both jobs measure the same sizes with
// allreduce_worker::hvd_measure (method: tools/common/bench_method.hpp), alternating
// job by job for `rounds` rounds, and each cell is the best round.

#include <cstddef>
#include <string>
#include <vector>

#include <hvactor/runtime.hpp>

namespace hvactor::bench {

struct hierarchical_config {
  size_t min_bytes = 4;
  size_t max_bytes = size_t{64} << 20;
  double budget_ms = 300;
  int rounds = 2;
  int timeout_s = 60;
};

/// The parent: starts the cluster (`node_binary`) and runs this program
/// with `child_args` and --address; returns its exit code.
int run_hierarchical_parent(const std::string& node_binary,
                            const std::vector<std::string>& child_args);

/// The child, joined to the cluster: prints the table; 0 on success.
int run_hierarchical_child(hvactor::runtime& rt, const hierarchical_config& cfg);

} // namespace hvactor::bench
