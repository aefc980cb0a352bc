#pragma once

// hvactor-up's cluster file: Ray's cluster launcher YAML for machines you
// already have (its "local" provider), plus hvactor's per-node options.
//
//   cluster_name: demo
//   provider:
//     type: local
//     head_ip: 10.0.0.1            # or {ip: .., node_id: .., num_cpus: .., num_gpus: .., ssh_port: ..}
//     worker_ips: [10.0.0.2, {ip: 10.0.0.3, node_id: gpu1, num_gpus: 4}]
//   auth:
//     ssh_user: ubuntu
//     ssh_private_key: ~/.ssh/id_ed25519
//     ssh_port: 22                 # optional
//   setup_commands: [...]          # every machine, before hvactor-node starts
//   head_setup_commands: [...]
//   worker_setup_commands: [...]
//   hvactor:                       # optional
//     port: 6380                   # the head's
//     node_binary: hvactor-node    # on the machines (default: from PATH)
//     tls: true                    # false: --insecure, trusted networks only
//     timeout: 30                  # seconds for ssh commands and for joining

#include <optional>
#include <string>
#include <vector>

namespace hvactor::up_tool {

/// One machine (the head or a worker) and its hvactor-node options.
struct machine {
  std::string ip;
  /// Unique in the cluster (default: "head", else the ip, with ":port"
  /// stripped); several workers on one machine need distinct ids.
  std::string node_id;
  std::optional<int> num_cpus;
  std::optional<int> num_gpus;
  int ssh_port = 22;
  bool head = false;
};

struct cluster_file {
  std::string name;
  machine head;
  std::vector<machine> workers;
  std::string ssh_user;
  std::string ssh_key;
  std::vector<std::string> setup_commands;
  std::vector<std::string> head_setup_commands;
  std::vector<std::string> worker_setup_commands;
  int port = 6380;
  std::string node_binary = "hvactor-node";
  bool tls = true;
  int timeout_s = 30;

  /// The head, then the workers.
  std::vector<machine> machines() const;
};

/// Reads and validates `path`. Throws std::invalid_argument naming the file
/// and the key for anything missing, mistyped or unknown (so that a typo
/// never falls back silently to a default), and for duplicate node ids.
cluster_file read_cluster_file(const std::string& path);

} // namespace hvactor::up_tool
