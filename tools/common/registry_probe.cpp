#include "registry_probe.hpp"

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <fmt/format.h>

#include "hvactor/errors.hpp"
#include "internal/actor_system.hpp"
#include "internal/interfaces.hpp"
#include "internal/net.hpp"
#include "internal/system_config.hpp"
#include "internal/transport.hpp"

namespace hvactor::tool {

struct registry_probe::impl {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  proto::node_registry registry;
};

registry_probe::registry_probe(const std::string& address, const tls::config& tls,
                               std::chrono::seconds timeout)
  : impl_(std::make_unique<impl>()) {
  auto [host, port] = net::parse_host_port(address, "head");
  configure_system(impl_->cfg, 2, tls);
  impl_->sys = std::make_unique<caf::actor_system>(impl_->cfg);
  auto found = transport::connect(*impl_->sys, host, port, timeout);
  if (!found)
    throw error(fmt::format("cannot reach the head at {}: {}", address,
                            impl_->sys->render(found.error())));
  impl_->registry = caf::actor_cast<proto::node_registry>(std::move(*found));
}

registry_probe::~registry_probe() {
  impl_->registry = nullptr;
}

std::vector<std::string> registry_probe::node_ids() {
  std::vector<std::string> out;
  auto listed = ask<proto::cluster_view>(*impl_->sys, impl_->registry, std::chrono::seconds(5),
                                         proto::list_atom_v);
  if (listed)
    for (auto& node : listed->nodes)
      out.push_back(node.node_id);
  return out;
}

} // namespace hvactor::tool
