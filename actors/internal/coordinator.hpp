#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>

#include "internal/interfaces.hpp"
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
  /// hvactor-run: `executable` is the user's SPMD program, started with its
  /// Horovod variables and no hvactor worker; the job ends when every
  /// process exited (finished_atom).
  bool launch = false;
  /// hvactor-run: each line a process writes (stream 1 stdout, 2 stderr),
  /// called in the coordinator, in arrival order per rank.
  std::function<void(int rank, int stream, const std::string& line)> on_output;
  /// hvactor::log::event from any process, in arrival order.
  std::function<void(int rank, const std::map<std::string, std::string>& fields)> on_event;
  std::vector<std::string> args;
};

/// Spawns the coordinator of one job (protocol: interfaces.hpp).
proto::coordinator spawn_coordinator(caf::actor_system& sys, coordinator_config cfg);

} // namespace hvactor
