#pragma once

#include <algorithm>
#include <cstddef>
#include <optional>
#include <string_view>

namespace hvactor::collectives {

/// Gloo allreduce algorithms hvactor uses. All of them run through Gloo's
/// options API (gloo::allreduce) on one context: Gloo's legacy algorithm
/// classes are never mixed with it (docs/development/platform-notes.md,
/// "Gloo: one API per context").
/// gather: an allgather of every rank's buffer, then each rank reduces the
/// copies in rank order itself (fewer messages than the ring for small
/// buffers; every rank computes the same bits).
/// doubling: recursive doubling (collectives/backends/gloo/doubling.hpp), log2(n)
/// exchanges of the whole buffer: for small buffers among many ranks.
enum class allreduce_algorithm { ring, bcube, gather, doubling };

/// "ring", "bcube", "gather" or "doubling".
const char* to_string(allreduce_algorithm a);

/// Which Gloo algorithm runs one allreduce: a plain policy, built once at
/// hvd::init from the options (HVACTOR_GLOO_ALLREDUCE) and consulted per
/// call without reading the environment.
///
/// Contract. A forced policy always answers its algorithm. The automatic
/// one answers gather when ranks x bytes <= gather_max_bytes (the gathered
/// copies a rank holds) and ranks < doubling_min_ranks, doubling when that
/// bound holds with more ranks, the ring otherwise. Measured on a 2-core loopback
/// machine (hvactor-bench allreduce --backend gloo with the algorithm
/// forced, 2026-11-25): gather takes 0.3-0.6x the ring's time with 2 ranks
/// up to 2 MiB (and below bcube's, which won 4-256 KiB before) and 0.5-0.8x
/// with 4 ranks up to 1 MiB; at 4 ranks x 4 MiB the ring takes 0.6x
/// gather's, at 2 ranks x 4 MiB they tie. The ring sends 2(n-1) segment
/// messages per rank and Gloo skips only empty ones, so a small allreduce
/// costs as many wake-ups as a large one; gather sends n - 1.
class allreduce_algorithm_policy {
public:
  /// The most bytes (ranks x message) for which the automatic policy
  /// gathers.
  static constexpr size_t gather_max_bytes = size_t{4} << 20;

  /// From this many ranks, what gather would take goes by recursive
  /// doubling instead: log2(n) steps and log2(n) x the message per rank,
  /// against gather's n - 1 of each (3 ranks: 3 steps against 2). Measured
  /// (2026-11-29, 2-core loopback, HVACTOR_SHM=0) at 4 ranks, 4 B-16 KiB:
  /// 4.2-4.5 ms a call against gather's 5.0-5.7; on 64 emulated nodes the
  /// negotiation's small allreduce took 400 ms by gather (63 ring steps).
  static constexpr int doubling_min_ranks = 4;

  /// The same bound where the ranks talk over a network link instead of
  /// loopback. A gather sends (n - 1) x the message from every rank, the
  /// ring 2(n - 1)/n x; where the link, not the copies, bounds the time,
  /// gather only wins while latency dominates. Measured on emulated 1
  /// Gbit/s links (hvactor-netcluster, 2026-11-27): with 2 nodes gather
  /// took 0.64x the ring's time at 256 KiB and 1.3x at 1 MiB; with 4 nodes
  /// 0.60x at 64 KiB and 1.4x at 256 KiB.
  static constexpr size_t network_gather_max_bytes = size_t{512} << 10;

  /// This policy for ranks that meet over a network: the automatic one
  /// gathers only up to network_gather_max_bytes; a forced one is kept.
  allreduce_algorithm_policy over_network() const noexcept {
    auto p = *this;
    p.gather_max_ = std::min(gather_max_, network_gather_max_bytes);
    return p;
  }

  /// Automatic: chosen per message by the measured thresholds.
  allreduce_algorithm_policy() = default;

  /// Always `forced`.
  explicit allreduce_algorithm_policy(allreduce_algorithm forced) : forced_(forced) {
  }

  /// From a setting's text: "" or "auto" is automatic, "ring" and "bcube"
  /// force that algorithm. Anything else throws std::invalid_argument
  /// naming `variable`, the value and the accepted values.
  static allreduce_algorithm_policy parse(std::string_view value, std::string_view variable);

  /// The algorithm for one allreduce of `bytes` bytes among `ranks` ranks.
  allreduce_algorithm choose(size_t bytes, int ranks) const noexcept {
    if (forced_)
      return *forced_;
    if (ranks > 1 && bytes <= gather_max_ / static_cast<size_t>(ranks))
      return ranks >= doubling_min_ranks ? allreduce_algorithm::doubling
                                         : allreduce_algorithm::gather;
    return allreduce_algorithm::ring;
  }

  /// Whether an allgather of `total` bytes in all among `ranks` ranks goes
  /// by recursive doubling (log2(n) steps) instead of Gloo's ring (n - 1):
  /// from doubling_min_ranks while `total` is within the gather bound, and
  /// never while the ring is forced (HVACTOR_GLOO_ALLREDUCE=ring).
  bool doubling_allgather(size_t total, int ranks) const noexcept {
    return forced_ != allreduce_algorithm::ring && ranks >= doubling_min_ranks
           && total <= gather_max_;
  }

  /// The forced algorithm, or nullopt when automatic.
  std::optional<allreduce_algorithm> forced() const noexcept {
    return forced_;
  }

private:
  std::optional<allreduce_algorithm> forced_;
  size_t gather_max_ = gather_max_bytes;
};

} // namespace hvactor::collectives
