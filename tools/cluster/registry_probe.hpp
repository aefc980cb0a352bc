#pragma once

// Which nodes a head knows: what `hvactor-node status` prints and what
// readiness (readiness.hpp) polls.

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "hvactor/tls.hpp"
#include "actors/protocol/interfaces.hpp"

namespace hvactor::cluster {

class registry_probe {
public:
  /// Connects to the head at `address` ("HOST:PORT") as a client with
  /// `tls` (empty: plain) within `timeout`; throws hvactor::error naming the
  /// address (and, without TLS, that a TLS head needs an identity).
  registry_probe(const std::string& address, const tls::config& tls,
                 std::chrono::seconds timeout);
  ~registry_probe();

  /// Every node the head lists now; throws hvactor::error naming the head
  /// when it does not answer within `timeout`.
  proto::cluster_view view(std::chrono::seconds timeout);

  /// The node ids the head lists now; nullopt when it does not answer
  /// within 5 s.
  std::optional<std::vector<std::string>> node_ids();

private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

} // namespace hvactor::cluster
