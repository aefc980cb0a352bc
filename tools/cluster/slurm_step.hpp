#pragma once

// hvactor-node inside a Slurm step (docs/development/platform-notes.md,
// "Slurm: hvactor-node inside a step"): the node's
// identity and resources from the step's environment. The job's side (the
// allocation hvactor-run reads) is runtime/internal/slurm.hpp.

#include <string>

#include "tools/cluster/node_options.hpp"

namespace hvactor::cluster {

/// True inside a Slurm step (SLURM_STEP_ID and SLURMD_NODENAME set).
bool in_slurm_step();

/// Which of the step's defaults the command line already gave.
struct slurm_explicit {
  bool node_id = false, cpus = false, gpus = false, work_dir = false, tls = false;
};

/// hvactor-node --slurm (and automatically inside a Slurm step): fills what
/// the command line left unset from the step's environment: node id from
/// SLURMD_NODENAME, CPUs from SLURM_CPUS_PER_TASK (else SLURM_CPUS_ON_NODE),
/// GPU ids from the step's CUDA_VISIBLE_DEVICES (none when unset), a
/// per-run work dir (run_work_dir_prefix), and with `tls_dir` the node's
/// identity in that directory (tls_layout). Prints each choice and its
/// source to stderr. Throws std::invalid_argument when SLURMD_NODENAME is
/// missing, or SLURM_JOB_ID or the node id is not a valid name.
void apply_slurm_defaults(node_options& o, const slurm_explicit& given, const std::string& tls_dir);

} // namespace hvactor::cluster
