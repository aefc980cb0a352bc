#include "slurm_mode.hpp"

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>

#include "internal/knobs.hpp"
#include "internal/process.hpp"

namespace hvactor::run_tool {

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

int run_driver(const launch_options& o, const slurm_cluster& cluster, std::atomic<int>& stop) {
  process_spec spec;
  spec.executable = find_program(o.program);
  spec.args = {o.program};
  spec.args.insert(spec.args.end(), o.args.begin(), o.args.end());
  spec.env = {{env::address, cluster.address()}};
  for (auto& kv : cluster.driver_tls_env())
    spec.env.push_back(kv);
  for (auto& [k, v] : o.env)
    spec.env.emplace_back(k, v);
  spec.echo_stderr = true;
  std::promise<process_exit> done;
  auto ended = done.get_future();
  auto child = child_process::start(spec, [&done](process_exit ex) { done.set_value(ex); });
  bool signalled = false;
  while (ended.wait_for(std::chrono::milliseconds(50)) != std::future_status::ready) {
    if (int sig = stop.load(); sig != 0 && !signalled) {
      child->signal(sig);
      signalled = true;
    }
  }
  auto ex = ended.get();
  if (ex.signal != 0) {
    fmt::print(stderr, "hvactor-run: the driver {} ended with {}\n", o.program,
               describe_exit(ex.exit_code, ex.signal));
    return 128 + ex.signal;
  }
  return ex.exit_code;
}

} // namespace hvactor::run_tool
