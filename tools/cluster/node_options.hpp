#pragma once

// The hvactor-node command line, both ways, in one place: what hvactor-node
// parses (declare_node_options, read_node_options: node_cli.cpp) and what the
// programs that start one build (node_command: hvactor-run's Slurm head and
// srun step, hvactor-up's ssh command line, the benchmarks' local clusters,
// `hvactor-node status` for hvactor-up --status).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <cxxopts.hpp>

#include "hvactor/tls.hpp"

namespace hvactor::cluster {

/// What `hvactor-node` was asked to do, defaults resolved.
struct node_options {
  /// "" (serve), "status", "certs" or "wait".
  std::string command;
  bool head = false;
  /// HEAD:PORT to join (a node) or to query (status, wait).
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
  /// Set by --slurm without --work-dir ("slurm-JOB-NODE"): serve() makes the
  /// work dir new, $TMPDIR/hvactor-UID/<this>.XXXXXX, and removes it at exit.
  std::string run_work_dir_prefix;
  tls::config tls;
  bool insecure = false;
  /// Seconds to wait for the head when joining.
  int connect_timeout_s = 10;
  /// Stop (exit 0) when the head goes away instead of rejoining it.
  bool exit_on_head_loss = false;
  /// The head's dashboard (tools/hvactor_node/dashboard.hpp): on, its
  /// address and port (Ray's defaults), the token it requires off loopback
  /// (generated and printed when empty); the port was given explicitly.
  bool include_dashboard = true;
  std::string dashboard_host = "127.0.0.1";
  int dashboard_port = 8265;
  bool dashboard_port_given = false;
  std::string dashboard_token;
  /// certs: the output directory, the names, extra subjectAltNames.
  std::string certs_dir;
  std::vector<std::string> names;
  std::vector<std::string> sans;
  /// wait: the node ids to wait for (none: until the head answers), and
  /// for how long (seconds).
  std::vector<std::string> wait_nodes;
  int wait_timeout_s = 30;
};

/// Declares every option of hvactor-node on `parser` (and its positional
/// command and names).
void declare_node_options(cxxopts::Options& parser);

/// The options `res` holds, checked, with defaults filled in; inside a Slurm
/// step (or with --slurm, --tls-dir) the step's defaults (slurm_step.hpp).
/// Throws std::invalid_argument naming the option.
node_options read_node_options(const cxxopts::ParseResult& res);

/// An hvactor-node invocation as another program starts it. Unset fields
/// are not passed: hvactor-node's defaults apply.
struct node_command {
  /// The binary (node_binary()), argv[0].
  std::string binary = "hvactor-node";
  bool head = false;
  /// The head to join (a node only).
  std::string address;
  std::optional<int> port;
  std::string bind;
  std::string node_ip;
  std::string node_id;
  std::optional<int> num_cpus;
  std::optional<int> num_gpus;
  std::string work_dir;
  std::optional<int> connect_timeout_s;
  /// --tls-cert/--tls-key/--tls-ca (tls_layout::identity()).
  tls::config tls;
  /// --tls-dir: each node takes DIR/<its node id>.pem (Slurm steps).
  std::string tls_dir;
  /// --insecure: listen off loopback without TLS.
  bool insecure = false;
  /// --slurm: id, CPUs, GPUs and work dir from the Slurm step.
  bool slurm = false;
  bool exit_on_head_loss = false;

  /// The argv, binary first.
  std::vector<std::string> argv() const;
};

/// --tls-cert C --tls-key K --tls-ca A for `tls`, or nothing when it is off.
std::vector<std::string> tls_args(const tls::config& tls);

/// argv of `hvactor-node status --address ADDRESS` with the TLS identity.
std::vector<std::string> status_argv(const std::string& binary, const std::string& address,
                                     const tls::config& tls);

/// The hvactor-node binary to start: $HVACTOR_NODE_BINARY, else
/// hvactor-node beside this executable, else the first in PATH.
std::string node_binary();

/// "HOST:PORT" from the head's ready line on stdout ("hvactor-node: head
/// 'ID' listening on HOST:PORT (...)"), or nullopt for any other line.
std::optional<std::string> listening_address(const std::string& line);

/// Whether `line` is a node's ready line on stdout ("hvactor-node: node
/// 'ID' joined HEAD and listens on ..."): it printed it once the head
/// acknowledged it.
bool joined_line(const std::string& line);

} // namespace hvactor::cluster
