#pragma once

#include <functional>

#include <memory>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>

#include "actors/protocol/interfaces.hpp"
#include "hvactor/tls.hpp"

namespace hvactor {

/// What a node offers.
struct node_agent_config {
  std::string node_id;
  std::string hostname;
  /// Address workers of this node use to reach drivers and peers.
  std::string address = "127.0.0.1";
  int num_cpus = 1;
  std::vector<int> gpu_ids;
  /// Binary cache directory (hvactor-node --work-dir); empty: workers run
  /// the driver's binary in place (embedded cluster).
  std::string work_dir;
  /// TLS identity handed to worker processes (they use the node's).
  tls::config tls;
  /// The registry beside this agent (the head), if any.
  proto::node_registry registry;
  /// Called (on the agent's thread) when the head is lost, instead of
  /// rejoining it: hvactor-node --exit-on-head-loss stops the node (a Slurm
  /// step ends with the hvactor-run that hosted the head).
  std::function<void()> on_head_lost;
};

/// Spawns the agent that owns this node's resources: it answers info,
/// reserves all-or-nothing per job (lowest free GPU ids first), releases a
/// reservation whose requester went away, starts a node_colocator for a
/// reserved job, caches shipped binaries, joins (and rejoins) the head and
/// tells the registry about every change of its free resources. Throws
/// std::invalid_argument, naming the value, for negative `num_cpus` or a
/// negative GPU id.
proto::node_agent spawn_node_agent(caf::actor_system& sys, node_agent_config cfg);

} // namespace hvactor
