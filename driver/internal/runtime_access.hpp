#pragma once

// Internal: a runtime's internals for the floors above the driver that
// place work themselves (hvactor::tune packs trials onto the cluster).

#include <chrono>

#include "actors/protocol/interfaces.hpp"
#include "driver/internal/runtime_impl.hpp"

namespace hvactor {

struct runtime_access {
  static runtime::impl& impl(runtime& rt) noexcept {
    return *rt.impl_;
  }
  /// Every live node of the cluster, as its registry sees it; throws
  /// hvactor::error when the registry does not answer within `bound`.
  static proto::cluster_view cluster(runtime& rt, std::chrono::milliseconds bound);
};

} // namespace hvactor
