#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "collectives/backends/allreduce_algorithm.hpp"
#include "collectives/backends/backend.hpp"
#include "collectives/rendezvous/rendezvous_client.hpp"

namespace hvactor::collectives {

/// Connects this rank to every other over Gloo's TCP transport (bound to
/// HOROVOD_GLOO_IFACE when set, else to `bind_host`), with rendezvous
/// through `client` under `prefix`. Throws rendezvous_timeout naming the
/// ranks that never arrived within the client's timeout. `algorithm`
/// picks each allreduce's Gloo algorithm. `client` must outlive the
/// backend: a failure asks the store which rank failed first, and tells it
/// whom this rank blames, before closing its connections. `job_ranks`:
/// the job's rank of each rank of `topo` (a process set's, the ranks across
/// nodes of a hierarchical path), empty when they are the job's ranks; the
/// driver names the job's rank when it tells the ranks that one died.
std::unique_ptr<backend> make_gloo_backend(const topology& topo, rendezvous_client& client,
                                           const std::string& prefix,
                                           const std::string& bind_host,
                                           allreduce_algorithm_policy algorithm,
                                           std::vector<int> job_ranks = {});

} // namespace hvactor::collectives
