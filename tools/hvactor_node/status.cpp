// hvactor-node status: what `ray status` shows, for an hvactor cluster.

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <fmt/format.h>

#include "internal/interfaces.hpp"
#include "internal/transport.hpp"
#include "hvactor/errors.hpp"
#include "internal/net.hpp"
#include "internal/system_config.hpp"
#include "node_options.hpp"

namespace hvactor::node_tool {

int status(const node_options& o) {
  auto [host, port] = net::parse_host_port(o.address, "--address");
  tls::validate(o.tls);
  caf::actor_system_config cfg;
  configure_system(cfg, 2, o.tls);
  caf::actor_system sys{cfg};
  auto timeout = std::chrono::seconds(o.connect_timeout_s);
  auto found = transport::connect(sys, host, port, timeout);
  if (!found)
    throw error(fmt::format("cannot reach the head at {}: {}{}", o.address,
                            sys.render(found.error()),
                            o.tls.enabled() ? "" : " (a TLS head needs --tls-cert/key/ca)"));
  auto registry = caf::actor_cast<proto::node_registry>(std::move(*found));
  auto listed = ask<proto::cluster_view>(sys, registry, timeout, proto::list_atom_v);
  registry = nullptr;
  if (!listed)
    throw error(
      fmt::format("the head at {} did not answer: {}", o.address, describe(listed.error())));
  auto& view = *listed;
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

} // namespace hvactor::node_tool
