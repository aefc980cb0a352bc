#pragma once

#include <caf/actor_system.hpp>

#include "actors/protocol/interfaces.hpp"

namespace hvactor {

/// Spawns the colocator of one job on this node: it starts one worker
/// process per rank of `req` (CUDA_VISIBLE_DEVICES = the reservation's GPU
/// ids, comma-joined), reports each exit to `coord`, kills its workers when
/// told to stop or when `coord` goes away, and then releases the job's
/// reservation at `agent`.
proto::node_colocator spawn_node_colocator(caf::actor_system& sys, proto::spawn_request req,
                                           proto::reservation res, proto::coordinator coord,
                                           proto::node_agent agent);

} // namespace hvactor
