#include "tools/cluster/registry_probe.hpp"

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <fmt/format.h>

#include "hvactor/errors.hpp"
#include "base/internal/actor_system.hpp"
#include "base/internal/caf_error.hpp"
#include "base/net/net.hpp"
#include "actors/protocol/system_config.hpp"
#include "base/net/transport.hpp"

namespace hvactor::cluster {

struct registry_probe::impl {
  std::string address;
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  proto::node_registry registry;
};

registry_probe::registry_probe(const std::string& address, const tls::config& tls,
                               std::chrono::seconds timeout)
  : impl_(std::make_unique<impl>()) {
  impl_->address = address;
  auto [host, port] = net::parse_host_port(address, "--address");
  configure_system(impl_->cfg, 2, tls);
  impl_->sys = std::make_unique<caf::actor_system>(impl_->cfg);
  auto found = transport::connect(*impl_->sys, host, port, timeout);
  if (!found)
    throw error(fmt::format("cannot reach the head at {}: {}{}", address,
                            impl_->sys->render(found.error()),
                            tls.enabled() ? "" : " (a TLS head needs --tls-cert/key/ca)"));
  impl_->registry = caf::actor_cast<proto::node_registry>(std::move(*found));
}

registry_probe::~registry_probe() {
  impl_->registry = nullptr;
}

proto::cluster_view registry_probe::view(std::chrono::seconds timeout) {
  auto listed = ask<proto::cluster_view>(*impl_->sys, impl_->registry, timeout,
                                         proto::list_atom_v);
  if (!listed)
    throw error(fmt::format("the head at {} did not answer: {}", impl_->address,
                            describe(listed.error())));
  return std::move(*listed);
}

std::optional<std::vector<std::string>> registry_probe::node_ids() {
  auto listed = ask<proto::cluster_view>(*impl_->sys, impl_->registry, std::chrono::seconds(5),
                                         proto::list_atom_v);
  if (!listed)
    return std::nullopt;
  std::vector<std::string> out;
  for (auto& node : listed->nodes)
    out.push_back(node.node_id);
  return out;
}

} // namespace hvactor::cluster
