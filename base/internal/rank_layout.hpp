#pragma once

// Internal: where one rank sits in its job, the one struct of Horovod's six
// rank variables (the planner's layouts, the collectives' topology, an
// elastic assignment).

#include <cstdint>

namespace hvactor {

/// Horovod's rank variables of one worker (HOROVOD_RANK, _SIZE,
/// _LOCAL_RANK, _LOCAL_SIZE, _CROSS_RANK, _CROSS_SIZE): local ranks count
/// the ranks on one node, cross ranks the nodes with a rank of the same
/// local rank. The defaults are a job of one process.
struct rank_layout {
  int32_t rank = 0;
  int32_t size = 1;
  int32_t local_rank = 0;
  int32_t local_size = 1;
  int32_t cross_rank = 0;
  int32_t cross_size = 1;

  friend bool operator==(const rank_layout&, const rank_layout&) = default;
};

} // namespace hvactor
