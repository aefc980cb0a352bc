#pragma once

#include <cstddef>
#include <span>
#include <utility>
#include <vector>

#include "hvactor/hvd_types.hpp"

namespace hvactor::collectives {

/// One queued allreduce as the planner sees it.
struct fusion_entry {
  size_t bytes = 0;
  hvd::dtype type = hvd::dtype::float32;
  hvd::op reduction = hvd::op::sum;
  /// Device memory (reduced by the device backend); never fused with host
  /// tensors.
  bool device = false;
};

/// Tensor fusion policy (Horovod's FuseResponses): which queued allreduces
/// run together. Plain code, deterministic, so that every rank that sees the
/// same queue makes the same decision.
class fusion_planner {
public:
  /// Entries are padded to this many bytes in the fusion buffer.
  static constexpr size_t atomic_unit = 64;

  /// `threshold` bytes of fusion buffer (HOROVOD_FUSION_THRESHOLD); 0
  /// disables fusion.
  explicit fusion_planner(size_t threshold) : threshold_(threshold) {
  }

  /// How many entries from the front of `queue` the next batch takes: as
  /// many as fit into the threshold, padded, and at least one.
  size_t batch_size(std::span<const fusion_entry> queue) const;

  /// Splits a batch into runs of consecutive entries that one reduction can
  /// carry (same dtype, same reduction; average counts as sum), as
  /// [begin, end) index pairs.
  static std::vector<std::pair<size_t, size_t>> groups(std::span<const fusion_entry> batch);

  /// `bytes` rounded up to atomic_unit.
  static size_t padded(size_t bytes) {
    return (bytes + atomic_unit - 1) / atomic_unit * atomic_unit;
  }

  size_t threshold() const {
    return threshold_;
  }
  /// Autotune's new threshold, for the next batches.
  void set_threshold(size_t bytes) {
    threshold_ = bytes;
  }

private:
  size_t threshold_;
};

} // namespace hvactor::collectives
