#pragma once

// The peers hvactor-bench measures next to hvactor, one size at a time
// (--peer mpi|gloo|torch): the same collective, sizes, calls and timing
// (bench_method.hpp; options and output: peer_protocol.hpp) through Open
// MPI (hvactor-bench-mpi under mpirun), raw Gloo (hvactor-bench __peer-gloo) or torch.distributed's gloo backend
// (hvactor-bench-torch.py on Debian's python3-torch). Their ranks are local
// processes of this machine, started for each size and reaped before the
// next, so that no idle peer competes with hvactor for the cores.

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace hvactor::bench_tool {

/// The names --peer accepts.
inline const std::vector<std::string>& peer_names() {
  static const std::vector<std::string> names{"mpi", "gloo", "torch", "nccl"};
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
  double time_us = 0;
  int64_t wrong = 0;
  std::vector<double> samples_us;
};

/// What run_peer() runs.
struct peer_request {
  std::string name, kind;
  int ranks = 2;
  uint64_t bytes = 4;
  int iters = 20, warmup = 5;
  bool check = false;
  /// The mpi peer's ranks pinned to a core each (mpirun --bind-to core)
  /// while there are no more of them than cores, else --bind-to none.
  bool bind = true;
  /// Every process of the peer is killed after this long.
  std::chrono::seconds limit{120};
};

/// Runs the peer for one size and reaps every process it started. Throws
/// std::runtime_error naming the peer, how it ended and its last stderr
/// lines when it fails or runs past the limit.
peer_point run_peer(const peer_request& req);

/// `hvactor-bench __peer-gloo ...`: one rank of the raw Gloo peer.
int run_gloo_peer(int argc, char** argv);

/// `hvactor-bench __peer-nccl ...`: the raw NCCL peer, one process over
/// --size GPUs (CUDA builds; peer_nccl.cpp).
int run_nccl_peer(int argc, char** argv);

} // namespace hvactor::bench_tool
