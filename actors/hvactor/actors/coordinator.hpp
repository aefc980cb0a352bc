#pragma once

#include <string>
#include <vector>

#include <caf/actor_system.hpp>

#include "hvactor/actors/interfaces.hpp"
#include "hvactor/settings.hpp"

namespace hvactor {

/// Everything a coordinator needs to run one job.
struct coordinator_config {
  std::string job_id;
  hvactor::settings settings;
  executor_options options;
  /// Where live nodes come from (the head's registry, or the embedded
  /// cluster's); nodes are used in its join order.
  proto::node_registry registry;
  /// Binary and argv the workers run (the driver's own).
  std::string executable;
  /// SHA-256 of `executable`; nodes that cache binaries get it shipped
  /// (when they lack it) and run their cached copy.
  std::string binary_hash;
  std::vector<std::string> args;
};

/// Spawns the coordinator of one job (protocol: interfaces.hpp).
proto::coordinator spawn_coordinator(caf::actor_system& sys, coordinator_config cfg);

} // namespace hvactor
