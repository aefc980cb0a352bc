#pragma once

// hvactor-run inside a Slurm allocation (docs/development/platform-notes.md,
// "Slurm: hvactor-run inside an allocation"): the head runs
// beside hvactor-run (an hvactor-node --head child offering no resources),
// one `srun` step starts an hvactor-node on every allocated node, and
// hvactor-run waits until each has joined before it places the ranks.

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "tools/cluster/tls_layout.hpp"
#include "base/internal/owned_dir.hpp"
#include "base/internal/process.hpp"
#include "tools/cluster/slurm_env.hpp"

namespace hvactor::cluster {

struct slurm_cluster_options {
  /// The hvactor-node binary (node_binary()).
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

  /// The driver's TLS identity (off on loopback).
  tls::config driver_tls() const;

  /// The longest stop() takes: the step's end (15 s), scancel and the
  /// signals after it (3 x 5 s), the head's SIGKILL (2 x 5 s).
  static constexpr std::chrono::milliseconds teardown_bound{40'000};

  /// Tears the cluster down (idempotent).
  void stop();

private:
  void start_head(const slurm::allocation& alloc);
  void start_nodes(const slurm::allocation& alloc);
  void wait_until_joined(const slurm::allocation& alloc);
  std::string step_id() const;

  /// The identity `name` in the per-job TLS directory (off on loopback).
  tls::config identity(const std::string& name) const;

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

} // namespace hvactor::cluster
