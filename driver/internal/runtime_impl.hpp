#pragma once

// Internal: what executor.cpp needs of a runtime.

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include "actors/protocol/interfaces.hpp"
#include "base/internal/program_libraries.hpp"
#include "base/net/connection_watchdog.hpp"
#include "hvactor/runtime.hpp"

namespace hvactor {

struct runtime::impl {
  std::vector<std::string> args;
  std::vector<std::string> original_args;
  runtime_options opts;
  std::string executable;
  /// SHA-256 of `executable` when joining a cluster (nodes cache by it).
  std::string binary_hash;
  /// The libraries shipped with `executable` (program_libraries.hpp), found
  /// with binary_hash.
  std::vector<program_library> libraries;
  /// Address drivers publish their coordinator and store on.
  std::string bind_host = "127.0.0.1";
  std::unique_ptr<caf::actor_system_config> cfg;
  std::unique_ptr<caf::actor_system> sys;
  /// `sys` lent as the process system (process_system.hpp): a store client
  /// in the driver's process uses it instead of creating a second one.
  std::shared_ptr<void> lent_system;
  /// The cluster's membership: the head's registry, or the embedded one.
  proto::node_registry registry;
  /// The embedded cluster's registry and node (null when joining a cluster).
  proto::node_registry local_registry;
  proto::node_agent local_agent;
  /// Under TLS: shuts down connections to the driver's published ports that
  /// stall (CAF 0.17's OpenSSL module has no handshake timeout).
  std::unique_ptr<connection_watchdog> watchdog;
  std::atomic<int> next_job{0};
  /// Joined clusters: set when the connection to the head's registry
  /// dropped (a head restart); the next job reconnects first.
  std::shared_ptr<std::atomic<bool>> registry_lost = std::make_shared<std::atomic<bool>>(false);

  /// The registry a new job places on. For a joined cluster whose head went
  /// away, reconnects to the head's address first (a restarted head is back
  /// on the same port); throws placement_timeout naming the head when it
  /// does not answer within `bound`.
  proto::node_registry registry_for_job(std::chrono::milliseconds bound);

  /// A registry whose only node is this machine (HorovodRunner's np < 0):
  /// the embedded cluster's, or, in a runtime that joined a cluster, a node
  /// of the driver's own with this machine's CPUs, started on first use.
  proto::node_registry driver_registry();
  /// That node's CPUs.
  int driver_cpus();

  /// The driver's own node when the runtime joined a cluster.
  std::mutex driver_mu;
  proto::node_registry driver_registry_;
  proto::node_agent driver_agent_;
};

} // namespace hvactor
