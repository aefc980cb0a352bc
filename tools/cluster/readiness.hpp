#pragma once

// Readiness: a cluster is up when its nodes have joined the head, not when
// their processes have started. hvactor-run (Slurm), hvactor-up, `hvactor-node
// wait` (the Kubernetes nodes' init container) and the benchmarks' local
// clusters wait this way: ask the head which nodes it lists, every 200 ms,
// until the expected ones are there or the time is up. No sleeps.

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "hvactor/tls.hpp"

namespace hvactor::cluster {

/// Where a wait ended.
struct readiness {
  /// The expected nodes the head lists, and those it does not, in the
  /// order they were expected.
  std::vector<std::string> joined, missing;
  /// Whether the head answered the last poll.
  bool head_answered = false;
  /// Why the head did not answer the last time ("" when it did).
  std::string head_error;

  /// Every expected node joined (with none expected: the head answered).
  bool ready() const noexcept {
    return head_answered && missing.empty();
  }
};

/// What wait_for_nodes does between two polls: waits (at most `pause`, it
/// may return early), or throws to give up.
using between_polls = std::function<void(const readiness& now, std::chrono::milliseconds pause)>;

/// Polls the head at `address` (client identity `tls`) every 200 ms until it
/// lists every node of `expected` (none: until it answers), or `timeout`
/// passes. The head need not be listening yet: a failed connection is
/// retried. `between` (default: sleep) runs after each poll that is not the
/// last. Never throws on its own: the caller names what is missing.
readiness wait_for_nodes(const std::string& address, const tls::config& tls,
                         const std::vector<std::string>& expected,
                         std::chrono::milliseconds timeout, const between_polls& between = {});

} // namespace hvactor::cluster
