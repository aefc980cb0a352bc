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
  /// Set by --slurm without --work-dir ("slurm-JOB-NODE"): serve() makes the
  /// work dir new, $TMPDIR/hvactor-UID/<this>.XXXXXX, and removes it at exit.
  std::string run_work_dir_prefix;
  tls::config tls;
  bool insecure = false;
  /// Seconds to wait for the head when joining.
  int connect_timeout_s = 10;
  /// Stop (exit 0) when the head goes away instead of rejoining it.
  bool exit_on_head_loss = false;
};

/// hvactor-node --slurm (and automatically inside a Slurm step): fills what
/// the command line left unset from the step's environment: node id from
/// SLURMD_NODENAME, CPUs from SLURM_CPUS_PER_TASK (else SLURM_CPUS_ON_NODE),
/// GPU ids from the step's CUDA_VISIBLE_DEVICES (none when unset), a
/// per-run work dir (run_work_dir_prefix), and with `tls_dir` the node's
/// certificate DIR/<node id>.pem. Prints each choice and its source to
/// stderr. Throws std::invalid_argument when SLURMD_NODENAME is missing, or
/// SLURM_JOB_ID or the node id is not a valid name.
struct slurm_explicit {
  bool node_id = false, cpus = false, gpus = false, work_dir = false, tls = false;
};
void apply_slurm_defaults(node_options& o, const slurm_explicit& given, const std::string& tls_dir);

/// Runs a head or a node until SIGTERM/SIGINT; returns the exit code.
int serve(node_options opts);

/// Prints every node of the cluster at opts.address; returns the exit code.
int status(const node_options& opts);

} // namespace hvactor::node_tool
