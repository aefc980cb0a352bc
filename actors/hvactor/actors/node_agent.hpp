#pragma once

#include <string>
#include <vector>

#include <caf/actor_system.hpp>

#include "hvactor/actors/interfaces.hpp"

namespace hvactor {

/// What a node offers.
struct node_agent_config {
  std::string node_id;
  std::string hostname;
  /// Address workers of this node use to reach drivers and peers.
  std::string address = "127.0.0.1";
  int num_cpus = 1;
  std::vector<int> gpu_ids;
};

/// Spawns the agent that owns this node's resources: it answers info,
/// reserves all-or-nothing per job (lowest free GPU ids first), and starts
/// a node_colocator for a reserved job.
proto::node_agent spawn_node_agent(caf::actor_system& sys, node_agent_config cfg);

} // namespace hvactor
