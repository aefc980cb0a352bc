#pragma once

// The peers hvactor-bench measures next to hvactor's executor workers
// (--peer spmd|mpi|gloo|torch|nccl): the same collective, sizes, calls and timing
// (bench_method.hpp; options and output: peer_protocol.hpp) through
// hvactor itself as an SPMD program under hvactor-run (hvactor-bench
// __peer-spmd, the path users run), Open
// MPI (hvactor-bench-mpi under mpirun), raw Gloo (hvactor-bench
// __peer-gloo), raw NCCL (__peer-nccl) or torch.distributed's gloo backend
// (hvactor-bench-torch.py on Debian's python3-torch). A peer job is one
// warm process per rank that measures every size of the sweep, as
// hvactor's workers do; the sweep runs one job per peer and round, and
// reaps it before the next, so that no idle peer competes with hvactor for
// the cores.

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "tools/hvactor_bench/peers/peer_protocol.hpp"

namespace hvactor::bench_tool {

/// The names --peer accepts.
inline const std::vector<std::string>& peer_names() {
  static const std::vector<std::string> names{"spmd", "mpi", "gloo", "torch", "nccl"};
  return names;
}

/// Empty when peer `name` can run on this machine, else why not and how to
/// install what it needs.
std::string peer_missing(const std::string& name);

/// A helper program next to hvactor-bench (the build tree) or in
/// <prefix>/libexec/hvactor (installed); empty when neither exists.
std::string helper_path(const std::string& file);

/// One size measured by a peer.
struct peer_point {
  uint64_t bytes = 0;
  double time_us = 0;
  int64_t wrong = 0;
  std::vector<double> samples_us;
};

/// A node of an emulated cluster (hvactor-netcluster) a peer's ranks run
/// on: its name (n1), network namespace and address.
struct peer_host {
  std::string node, ns, address;
};

/// The nodes n1, n2, ... of the emulated cluster this process runs in
/// (HVACTOR_NETCLUSTER, set by `hvactor-netcluster up -- COMMAND`), as
/// `hvactor-netcluster hosts` lists them; empty outside one. Throws
/// std::invalid_argument when the cluster cannot be asked.
std::vector<peer_host> netcluster_hosts();

/// What run_peer() runs.
struct peer_request {
  std::string name, kind;
  int ranks = 2;
  /// Every size of the sweep, in order, with its call counts.
  std::vector<peer_size> sizes;
  bool check = false;
  /// The mpi peer's ranks pinned to a core each (mpirun --bind-to core)
  /// while there are no more of them than cores, else --bind-to none.
  bool bind = true;
  /// The gloo peer's allreduce algorithm (HVACTOR_GLOO_ALLREDUCE's values).
  std::string gloo_algorithm = "auto";
  /// Every process of the peer is killed after this long.
  std::chrono::seconds limit{120};
  /// Across the nodes of an emulated cluster: `per_host` ranks on each of
  /// these (mpi: mpirun's daemons started in their namespaces through
  /// hvactor-netcluster's rsh agent, TCP between nodes; gloo: each rank
  /// started in its node's namespace, bound to its address). Empty: every
  /// rank on this machine, over loopback.
  std::vector<peer_host> hosts;
  int per_host = 0;
  /// spmd: hvactor-run's options (cluster, layout, binding, -x), before
  /// `-- hvactor-bench __peer-spmd ...`.
  std::vector<std::string> launcher_args;
};

/// Runs one job of the peer over every size and reaps every process it
/// started; one point per size, in order. Throws std::runtime_error naming
/// the peer, how it ended and its last stderr lines when it fails, misses a
/// size or runs past the limit.
std::vector<peer_point> run_peer(const peer_request& req);

/// `hvactor-bench __peer-spmd ...`: one rank of the SPMD path, started by
/// hvactor-run (peer_spmd.cpp).
int run_spmd_peer(int argc, char** argv);

/// `hvactor-bench __peer-gloo ...`: one rank of the raw Gloo peer.
int run_gloo_peer(int argc, char** argv);

/// `hvactor-bench __peer-nccl ...`: the raw NCCL peer, one process over
/// --size GPUs (CUDA builds; peer_nccl.cpp).
int run_nccl_peer(int argc, char** argv);

} // namespace hvactor::bench_tool
