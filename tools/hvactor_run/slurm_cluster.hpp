#pragma once

// hvactor-run inside a Slurm allocation (notes/slurm.md 4.1): the head runs
// beside hvactor-run (an hvactor-node --head child offering no resources),
// one `srun` step starts an hvactor-node on every allocated node, and
// hvactor-run waits until each has joined before it places the ranks.

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "internal/owned_dir.hpp"
#include "internal/process.hpp"
#include "internal/slurm.hpp"

namespace hvactor::run_tool {

struct slurm_cluster_options {
  /// The hvactor-node binary (HVACTOR_NODE_BINARY, else next to hvactor-run,
  /// else PATH).
  std::string node_binary;
  /// The head's listening address; empty: the address of this host that
  /// reaches the first node (127.0.0.1 when that is loopback).
  std::string bind;
  /// How long every node may take to join.
  std::chrono::seconds timeout{30};
};

/// A cluster over the allocation: up when constructed, torn down by stop()
/// or the destructor (head closed, so every node started with
/// --exit-on-head-loss stops its workers and exits; the step ends; srun is
/// signalled only when it does not). Off loopback it makes a per-job CA and
/// certificates (a new 0700 directory under $HOME/.hvactor, which compute
/// nodes share) so that the whole job is mutual TLS. The directories it makes
/// are removed at the end, and nothing else.
class slurm_cluster {
public:
  /// Throws hvactor::error naming the nodes that never joined within the
  /// timeout, or the one whose task failed, with the step's last lines.
  slurm_cluster(const slurm::allocation& alloc, slurm_cluster_options opts);
  ~slurm_cluster();
  slurm_cluster(const slurm_cluster&) = delete;
  slurm_cluster& operator=(const slurm_cluster&) = delete;

  /// "HOST:PORT" of the head.
  const std::string& address() const noexcept {
    return address_;
  }

  /// --tls-cert/--tls-key/--tls-ca of the driver identity, or empty.
  std::vector<std::string> driver_tls_args() const;

  /// HVACTOR_TLS_* for a driver program (hvactor-run --driver), or empty.
  std::vector<std::pair<std::string, std::string>> driver_tls_env() const;

  /// Tears the cluster down (idempotent).
  void stop();

private:
  void start_head(const slurm::allocation& alloc);
  void start_nodes(const slurm::allocation& alloc);
  void wait_for_nodes(const slurm::allocation& alloc);
  std::string step_id() const;

  const std::string& tls_dir() const noexcept {
    return tls_dir_.path();
  }

  slurm_cluster_options opts_;
  std::string job_id_;
  std::string bind_;
  /// Made new by this run ($HOME/.hvactor/slurm-JOB.XXXXXX, and
  /// $TMPDIR/hvactor-UID/slurm-JOB-head.XXXXXX); stop() removes them.
  owned_dir tls_dir_;
  owned_dir work_dir_;
  std::string address_;
  std::shared_ptr<child_process> head_;
  std::shared_ptr<child_process> step_;
  struct shared;
  std::shared_ptr<shared> state_;
};

/// The hvactor-node binary hvactor-run starts: $HVACTOR_NODE_BINARY, else
/// hvactor-node beside this executable, else the first in PATH.
std::string node_binary();

} // namespace hvactor::run_tool
