#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "collectives/backends/allreduce_algorithm.hpp"
#include "collectives/backends/backend.hpp"
#include "collectives/backends/host_paths.hpp"
#include "collectives/rendezvous/rendezvous_client.hpp"

namespace hvactor::collectives {

namespace shm {
class segment;
} // namespace shm

/// How hvd::init builds the host backend.
struct host_backend_options {
  allreduce_algorithm_policy gloo_allreduce;
  path_settings paths;
  /// Where this rank's shared-memory segment comes from (a process set's
  /// own, process_sets.cpp); unset: the one the colocator handed down.
  /// nullptr: none (then the ranks go over Gloo).
  std::function<std::shared_ptr<shm::segment>()> segment;
  /// A process set's ranks in the job, by set rank: its errors (which count
  /// ranks within the set) then also name the job's ranks. Empty: the job.
  std::vector<int> members;
};

/// The node's segment the colocator handed down (HVACTOR_SHM_FD), or
/// nullptr: none, or not usable (logged, naming `rank`).
std::shared_ptr<shm::segment> inherited_segment(int rank);

/// The backend of host memory for a job of several processes: a Gloo
/// context over all ranks (always: alltoall, and every op when nothing
/// faster applies), the node's shared-memory segment (inherited from the
/// colocator as HVACTOR_SHM_FD) for the ranks on one node, and, in a job
/// on several nodes, one Gloo context per local rank across the nodes for
/// the hierarchical path. Which path each operation takes is decided once,
/// identically on every rank (host_paths), and reported by describe().
/// A failure on any path makes this rank leave the segment and close its
/// Gloo connections, so that its peers, here and on other nodes, fail at
/// once rather than after their timeout. `client` must outlive the backend
/// (make_gloo_backend).
std::unique_ptr<backend> make_host_backend(const topology& topo, rendezvous_client& client,
                                           const std::string& prefix,
                                           const std::string& bind_host,
                                           const host_backend_options& opts);

} // namespace hvactor::collectives
