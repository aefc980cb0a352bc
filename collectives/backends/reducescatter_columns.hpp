#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "collectives/backends/host_paths.hpp"
#include "hvactor/hvd_types.hpp"

namespace hvactor::collectives {

/// Where the parts of a hierarchical reducescatter go (host_backend), a
/// plain plan made identically on every rank. Local rank l of every node
/// owns "column l", the parts of the ranks with local rank l on every node,
/// in cross-rank order: the node reduces each column on shared memory
/// (into the rank that owns it), then the ranks with local rank l
/// reduce-scatter their column across the nodes, each part going straight
/// to its rank. So every element crosses the network once, toward the one
/// rank that keeps it (an allreduce's ring sends it twice).
struct reducescatter_columns {
  struct range {
    size_t begin = 0;
    size_t count = 0;
  };

  /// Column l's place in the column-ordered copy (by local rank).
  std::vector<range> columns;
  /// Every part's place in the input and in the column-ordered copy, in
  /// the copy's order (column 0 from node 0 to the last node, column 1 ...).
  std::vector<range> from;
  std::vector<size_t> to;
  /// The parts of this rank's column by cross rank (its sends across).
  std::vector<int64_t> sends;
  /// This rank's part, from every node (its receives across).
  std::vector<int64_t> receives;

  /// `counts[r]`: rank r's part (elements, consecutive in rank order);
  /// `p`: a hierarchical layout (p.world_of); `rank`, `local_rank`: this
  /// rank's.
  static reducescatter_columns plan(const host_paths& p, std::span<const size_t> counts, int rank,
                                    int local_rank);

  /// Copies the `esz`-byte elements at `in` into column order at `out`.
  void arrange(const void* in, void* out, size_t esz) const;

  /// Reduces with `o` the copies of this rank's part received from every
  /// node (consecutive at `received`, by cross rank) into `out`, node 0's
  /// first, as shm::reduce does.
  void fold(const void* received, void* out, hvd::dtype t, hvd::op o) const;
};

} // namespace hvactor::collectives
