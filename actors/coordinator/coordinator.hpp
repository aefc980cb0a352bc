#pragma once

#include <functional>
#include <memory>
#include <map>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>

#include "base/internal/program_libraries.hpp"
#include "actors/protocol/interfaces.hpp"
#include "hvactor/settings.hpp"

namespace hvactor {

/// The driver's direct caller (job_session::call_workers): its blocking
/// actor and the request id of every direct call it makes. The coordinator
/// answers that id with a proto::job_failed when the job fails or shuts
/// down, so that a call in flight ends at once and the next one goes
/// through the coordinator.
struct direct_caller {
  caf::strong_actor_ptr actor;
  caf::message_id call;
};

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
  /// The executable's own libraries, shipped and cached with it.
  std::vector<program_library> libraries;
  /// hvactor-run: `executable` is the user's SPMD program, started with its
  /// Horovod variables and no hvactor worker; the job ends when every
  /// process exited (finished_atom).
  bool launch = false;
  /// Executor jobs: what happens to the workers' stdout and stderr
  /// (proto::output_inherit, output_forward to on_output, output_drop).
  int32_t output = proto::output_inherit;
  /// hvactor-run (and executor jobs with output_forward): each line a process writes (stream 1 stdout, 2 stderr),
  /// called in the coordinator, in arrival order per rank.
  std::function<void(int rank, int stream, const std::string& line)> on_output;
  /// hvactor::log::event from any process, in arrival order.
  std::function<void(int rank, const std::map<std::string, std::string>& fields)> on_event;
  std::vector<std::string> args;
  /// Who makes direct calls (none: every call goes through the coordinator).
  direct_caller direct;
  /// The job's rendezvous store (elastic jobs publish each generation's
  /// assignments there).
  proto::rendezvous_store store;
  /// Nodes to use first, in this order (hvactor-run in a Slurm allocation:
  /// the allocation's order, so rank 0 is on its first node); the others
  /// follow in join order.
  std::vector<std::string> node_order;
};

/// Spawns the coordinator of one job (protocol: interfaces.hpp;
/// coordinator_state.hpp): an elastic job when `cfg.options.min_workers`
/// is set, else a static one.
proto::coordinator spawn_coordinator(caf::actor_system& sys, coordinator_config cfg);

} // namespace hvactor
