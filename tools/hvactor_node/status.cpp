// hvactor-node status (what `ray status` shows, for an hvactor cluster),
// wait (readiness, for a Kubernetes init container) and certs.

#include <fmt/format.h>

#include "tools/cluster/readiness.hpp"
#include "tools/cluster/registry_probe.hpp"
#include "tools/cluster/tls_layout.hpp"
#include "commands.hpp"

namespace hvactor::node_tool {

int status(const node_options& o) {
  tls::validate(o.tls);
  auto timeout = std::chrono::seconds(o.connect_timeout_s);
  auto view = cluster::registry_probe{o.address, o.tls, timeout}.view(timeout);
  int cpus = 0, free_cpus = 0, gpus = 0, free_gpus = 0;
  fmt::print("{:<20} {:<22} {:>10} {:>10}  {}\n", "NODE", "ADDRESS", "CPU free", "GPU free",
             "JOBS");
  for (auto& n : view.nodes) {
    fmt::print("{:<20} {:<22} {:>10} {:>10}  {}\n", n.node_id,
               fmt::format("{}:{}", n.address, n.port),
               fmt::format("{}/{}", n.free.cpus, n.total.cpus),
               fmt::format("{}/{}", n.free.gpus, n.total.gpus),
               n.jobs.empty() ? "-" : fmt::format("{}", fmt::join(n.jobs, ",")));
    cpus += n.total.cpus;
    free_cpus += n.free.cpus;
    gpus += n.total.gpus;
    free_gpus += n.free.gpus;
  }
  fmt::print("{} nodes; CPU {}/{} free; GPU {}/{} free\n", view.nodes.size(), free_cpus, cpus,
             free_gpus, gpus);
  return 0;
}

int wait(const node_options& o) {
  tls::validate(o.tls);
  fmt::print(stderr, "hvactor-node: waiting for the head at {}{}\n", o.address,
             o.wait_nodes.empty() ? std::string{}
                                  : fmt::format(" to list {}", fmt::join(o.wait_nodes, ", ")));
  auto r = cluster::wait_for_nodes(o.address, o.tls, o.wait_nodes,
                                   std::chrono::seconds(o.wait_timeout_s));
  if (r.ready()) {
    fmt::print(stderr, "hvactor-node: the head at {} is ready\n", o.address);
    return 0;
  }
  fmt::print(stderr, "hvactor-node: the head at {} is not ready after {} s: {}\n", o.address,
             o.wait_timeout_s,
             !r.head_answered ? r.head_error
                              : fmt::format("not listed: {}", fmt::join(r.missing, ", ")));
  return 1;
}

int certs(const node_options& o) {
  for (auto& path : cluster::tls_layout{o.certs_dir}.make(o.names, o.sans))
    fmt::print("wrote {}\n", path);
  cluster::tls_layout dir{o.certs_dir};
  fmt::print("Start each process with --tls-cert {} --tls-key {} --tls-ca {} (keep ca.key off "
             "the cluster's machines).\n",
             dir.certificate("NAME"), dir.key("NAME"), dir.ca());
  return 0;
}

} // namespace hvactor::node_tool
