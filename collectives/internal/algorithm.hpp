#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace hvactor::collectives {

/// Gloo allreduce algorithms hvactor uses. All of them run through Gloo's
/// options API (gloo::allreduce) on one context: Gloo's legacy algorithm
/// classes are never mixed with it (notes/collectives.md, 1.5).
enum class allreduce_algorithm { ring, bcube };

/// "ring" or "bcube".
const char* to_string(allreduce_algorithm a);

/// Which Gloo algorithm runs one allreduce: a plain policy, built once at
/// hvd::init from the options (HVACTOR_GLOO_ALLREDUCE) and consulted per
/// call without reading the environment.
///
/// Contract. A forced policy always answers its algorithm. The automatic
/// one answers bcube for exactly 2 ranks and bcube_min_bytes <= bytes <
/// bcube_max_bytes, the ring otherwise. Measured on a 2-core loopback
/// machine (README, benchmarks/allreduce with the algorithm forced): with
/// two ranks bcube's per-call p50 is below the ring's from 4 KiB to 64 KiB,
/// the ring's is half of bcube's from 256 KiB up; with more ranks than
/// cores bcube's loop thread spins (notes 1.5) and the ring wins
/// everywhere; below 4 KiB they tie and the ring is Gloo's default.
class allreduce_algorithm_policy {
public:
  /// The smallest message (bytes) for which 2 ranks take bcube.
  static constexpr size_t bcube_min_bytes = size_t{4} << 10;
  /// The first message size (bytes) for which 2 ranks take the ring again.
  static constexpr size_t bcube_max_bytes = size_t{256} << 10;

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
    if (ranks == 2 && bytes >= bcube_min_bytes && bytes < bcube_max_bytes)
      return allreduce_algorithm::bcube;
    return allreduce_algorithm::ring;
  }

  /// The forced algorithm, or nullopt when automatic.
  std::optional<allreduce_algorithm> forced() const noexcept {
    return forced_;
  }

private:
  std::optional<allreduce_algorithm> forced_;
};

} // namespace hvactor::collectives
