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
  /// Node agents to place on, in registry order.
  std::vector<proto::node_agent> agents;
  /// Binary and argv the workers run (the driver's own).
  std::string executable;
  std::vector<std::string> args;
};

/// Spawns the coordinator of one job (protocol: interfaces.hpp).
proto::coordinator spawn_coordinator(caf::actor_system& sys, coordinator_config cfg);

} // namespace hvactor
