#pragma once

// What `hvactor-node` was asked to do (parsed in main.cpp).

#include <cstdint>
#include <string>
#include <vector>

#include "hvactor/tls.hpp"

namespace hvactor::node_tool {

struct node_options {
  bool head = false;
  /// HEAD:PORT to join (a node) or to query (status).
  std::string address;
  /// Listening port: the registry's on the head, the agent's on a node.
  uint16_t port = 0;
  std::string bind;
  /// Address others use to reach this node; default: the bind address.
  std::string node_ip;
  std::string node_id;
  int num_cpus = 0;
  std::vector<int> gpu_ids;
  std::string work_dir;
  tls::config tls;
  bool insecure = false;
  /// Seconds to wait for the head when joining.
  int connect_timeout_s = 10;
};

/// Runs a head or a node until SIGTERM/SIGINT; returns the exit code.
int serve(node_options opts);

/// Prints every node of the cluster at opts.address; returns the exit code.
int status(const node_options& opts);

} // namespace hvactor::node_tool
