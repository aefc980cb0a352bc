#pragma once

// Internal: what executor.cpp needs of a runtime.

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include "hvactor/actors/interfaces.hpp"
#include "hvactor/runtime.hpp"

namespace hvactor {

struct runtime::impl {
  std::vector<std::string> args;
  std::vector<std::string> original_args;
  runtime_options opts;
  std::string executable;
  /// Address drivers publish their coordinator and store on.
  std::string bind_host = "127.0.0.1";
  std::unique_ptr<caf::actor_system_config> cfg;
  std::unique_ptr<caf::actor_system> sys;
  proto::node_agent local_agent;
  std::vector<proto::node_agent> agents;
  std::atomic<int> next_job{0};
};

} // namespace hvactor
