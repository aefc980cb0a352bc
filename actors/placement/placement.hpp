#pragma once

// Gang placement of a job's workers on nodes (all or nothing), the policy
// behind horovod.ray's PGStrategy (PACK) and ColocatedStrategy
// (STRICT_SPREAD, formerly one NodeColocator per host). Plain functions over
// plain data: no actors, no I/O.

#include <optional>
#include <string>
#include <vector>

namespace hvactor {

/// What the node registry knows about one live node.
struct node_resources {
  std::string node_id;
  int total_cpus = 0;
  int total_gpus = 0;
  int free_cpus = 0;
  int free_gpus = 0;
};

/// How many workers a job needs and what each one needs.
struct placement_request {
  /// Workers of a PACK job (used when `workers_per_host == 0`).
  int num_workers = 0;
  /// Distinct hosts of a colocated job (used when `workers_per_host > 0`).
  int num_hosts = 0;
  /// Workers on each host of a colocated job; 0 selects PACK.
  int workers_per_host = 0;
  int cpus_per_worker = 1;
  int gpus_per_worker = 0;

  /// True for a colocated job (`num_hosts` x `workers_per_host`).
  bool colocated() const noexcept {
    return workers_per_host > 0;
  }

  /// World size: `num_workers`, or `num_hosts * workers_per_host`.
  int total_workers() const noexcept {
    return colocated() ? num_hosts * workers_per_host : num_workers;
  }
};

/// The workers one node runs and the resources reserved for them.
struct node_assignment {
  std::string node_id;
  /// World ranks, ascending and contiguous.
  std::vector<int> ranks;
  /// `cpus_per_worker * ranks.size()`.
  int cpus = 0;
  /// `gpus_per_worker * ranks.size()`.
  int gpus = 0;
};

/// A complete placement: every rank 0..n-1 on exactly one node; nodes in
/// the order they were given, ranks contiguous in that order.
struct placement_plan {
  std::vector<node_assignment> nodes;
};

/// How many workers needing `cpus_per_worker` CPUs and `gpus_per_worker`
/// GPUs fit in a node's FREE resources (the GPU term is ignored when
/// `gpus_per_worker == 0`; negative free counts fit nothing).
int workers_that_fit(const node_resources& node, int cpus_per_worker, int gpus_per_worker);

/// Plans a job on `nodes` (registry order) using their FREE resources;
/// std::nullopt when the job does not fit as a whole.
///
/// PACK: if one node fits every worker, the first such node takes them all;
/// otherwise nodes are filled in order, each as full as it allows, skipping
/// nodes that fit none. Colocated: the first `num_hosts` nodes that each fit
/// `workers_per_host` workers; host i runs ranks
/// `workers_per_host*i .. workers_per_host*(i+1)-1`.
///
/// Throws std::invalid_argument for a non-positive size (num_workers,
/// num_hosts, cpus_per_worker), a negative gpus_per_worker or
/// workers_per_host, `num_hosts` set for PACK or `num_workers` set for a
/// colocated job, or two nodes with the same id.
std::optional<placement_plan> plan_placement(const placement_request& req,
                                             const std::vector<node_resources>& nodes);

/// The request in numbers, for error messages: "4 workers x {CPU: 1, GPU: 0}
/// = {CPU: 4, GPU: 0}" or "2 hosts x 4 workers x {CPU: 1, GPU: 0} =
/// {CPU: 8, GPU: 0}, each host needs {CPU: 4, GPU: 0}".
std::string describe(const placement_request& req);

/// The nodes' resources, for error messages: "node 'a': CPU 2 free of 2,
/// GPU 0 free of 0; node 'b': ..."; "no live nodes" when empty.
std::string describe(const std::vector<node_resources>& nodes);

/// Throws std::runtime_error("Colocator actors must be placed on unique
/// nodes! Got: [a, a]") if `plan` uses a node more than once.
void check_unique_nodes(const placement_plan& plan);

} // namespace hvactor
