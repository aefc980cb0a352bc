#pragma once

// Which nodes a head knows: what hvactor-run (Slurm) and hvactor-up poll
// while they wait for their nodes to join.

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "hvactor/tls.hpp"

namespace hvactor::tool {

class registry_probe {
public:
  /// Connects to the head at `address` ("HOST:PORT") as a client with
  /// `tls` (empty: plain); throws hvactor::error naming the address.
  registry_probe(const std::string& address, const tls::config& tls,
                 std::chrono::seconds timeout);
  ~registry_probe();

  /// The node ids the head lists now; empty when it does not answer
  /// within 5 s.
  std::vector<std::string> node_ids();

private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

} // namespace hvactor::tool
