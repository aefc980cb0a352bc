#pragma once

// Local and cross ranks of a static job, computed exactly as horovod.ray's
// `Coordinator.register` / `finalize_registration` (horovod/ray/runner.py).
// A plain class: no actors, no I/O.

#include <string>
#include <utility>
#include <vector>

#include "base/internal/rank_layout.hpp"

namespace hvactor {

/// Collects (rank, node) registrations and derives every worker's layout.
///
/// Nodes are ordered by first registration. Within a node, workers keep
/// registration order and a worker's local rank is its index in that order.
/// A worker's cross rank is the number of earlier nodes that have a worker
/// at the same local-rank index; its cross size is the number of nodes that
/// have a worker at that index. Not thread-safe.
class rank_planner {
public:
  /// Records that world rank `rank` runs on node `node_id`. Never throws on
  /// bad input; `plan()` reports it.
  void add(int rank, const std::string& node_id);

  /// Layout per world rank (index = rank); empty when nothing was added.
  /// Throws std::invalid_argument, naming the offending ranks and nodes,
  /// unless the registered ranks are exactly 0..n-1, each once.
  std::vector<rank_layout> plan() const;

private:
  /// Node id and its ranks in registration order; nodes in first-seen order.
  std::vector<std::pair<std::string, std::vector<int>>> nodes_;
  int registered_ = 0;
};

} // namespace hvactor
