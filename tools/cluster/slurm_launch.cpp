#include "tools/cluster/slurm_launch.hpp"

#include <stdexcept>

#include <fmt/format.h>


namespace hvactor::cluster {

namespace {

// T when every node runs T tasks, else 0.
int uniform_tasks(const slurm::allocation& alloc) {
  if (alloc.tasks_per_node.size() != alloc.nodes.size() || alloc.tasks_per_node.empty())
    return 0;
  int t = alloc.tasks_per_node.front();
  for (int x : alloc.tasks_per_node)
    if (x != t)
      return 0;
  return t;
}

} // namespace

std::optional<slurm::allocation> allocation_to_launch(const std::string& launcher,
                                                      bool has_address, bool driver) {
  if (launcher != "auto" && launcher != "local" && launcher != "slurm")
    throw std::invalid_argument("--launcher must be auto, local or slurm (got '" + launcher
                                + "')");
  std::optional<slurm::allocation> alloc;
  if (launcher == "slurm" || (launcher == "auto" && !has_address))
    alloc = slurm::allocation_from_env();
  if (launcher == "slurm" && !alloc)
    throw std::invalid_argument("--launcher slurm: not inside a Slurm allocation (SLURM_JOB_ID "
                                "is not set; run it under salloc or sbatch)");
  if (alloc && has_address)
    throw std::invalid_argument("--launcher slurm starts its own cluster: drop --address");
  if (driver && !alloc)
    throw std::invalid_argument("--driver needs a Slurm allocation (run it under salloc or "
                                "sbatch)");
  return alloc;
}

void apply_allocation(const slurm::allocation& alloc, launch_options& o, bool gpus_given) {
  int nodes = static_cast<int>(alloc.nodes.size());
  int per_node = uniform_tasks(alloc);
  if (per_node == 0 && alloc.gpus_per_node > 0 && !alloc.ntasks)
    per_node = alloc.gpus_per_node;
  // Products in 64 bits: the counts come from the environment (bounded by
  // allocation_from_env) and the command line.
  long long per_node_total = static_cast<long long>(per_node) * nodes;
  if (o.np <= 0 && !o.num_hosts && !o.min_np) {
    if (per_node > 0 && (!alloc.ntasks || *alloc.ntasks == per_node_total)) {
      alloc.default_ranks(); // refuses too many ranks, naming the variables
      o.num_hosts = nodes;
      o.per_host = per_node;
    } else {
      o.np = alloc.default_ranks();
    }
  } else if (o.np > 0 && !o.num_hosts && per_node > 0 && o.np == per_node_total) {
    o.num_hosts = nodes;
    o.per_host = per_node;
  }
  if (o.num_hosts && o.np <= 0) {
    long long np = static_cast<long long>(*o.num_hosts) * o.per_host.value_or(1);
    if (np > slurm::max_ranks)
      throw std::invalid_argument(fmt::format("--num-hosts {} x --per-host {} is {} ranks, more "
                                              "than {}",
                                              *o.num_hosts, o.per_host.value_or(1), np,
                                              slurm::max_ranks));
    o.np = static_cast<int>(np);
  }
  if (alloc.gpus_per_node > 0 && !gpus_given)
    o.gpus_per_worker = 1;
  // Rank 0 on the allocation's first node, as srun and mpirun place them.
  o.node_order = alloc.nodes;
  fmt::print(stderr, "hvactor-run: {} rank{}{} from the allocation{}\n", o.np,
             o.np == 1 ? "" : "s",
             o.num_hosts ? fmt::format(" ({} per node)", o.per_host.value_or(1)) : "",
             o.gpus_per_worker > 0 ? fmt::format(", {} GPU each", o.gpus_per_worker) : "");
}

} // namespace hvactor::cluster
