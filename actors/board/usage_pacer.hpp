#pragma once

// Internal: when a colocator sends its workers' usage to the dashboard
// (node_colocator.cpp's sample), a plain policy.
//
// A colocator reads each worker's CPU time and resident memory from /proc
// and sends them to its coordinator, which passes the job on to the head.
// Every 2 s, that woke the node, the driver and the head (about 10
// wake-ups in all for each node's sample) even while the job sat idle.
// Now a sample goes out only when it differs from the last one sent by
// what the dashboard shows (0.1 s of CPU, 1 MiB), and while samples do
// not change the colocator looks less and less often, up to
// board_limits::max_sample_interval; a change brings it back to
// board_limits::sample_interval.

#include <chrono>
#include <cmath>
#include <cstdint>
#include <map>

#include "actors/board/board_types.hpp"

namespace hvactor::detail {

class usage_pacer {
public:
  /// The smallest differences the dashboard shows.
  static constexpr double cpu_step_seconds = 0.05;
  static constexpr uint64_t rss_step_bytes = uint64_t{1} << 20;

  /// Takes the sample read now: true when it should be sent (the first
  /// one, a rank that came or went, or a visible change); it then becomes
  /// the last one sent and the next look is board_limits::sample_interval
  /// away, otherwise twice the last wait (at most max_sample_interval).
  bool take(const proto::rank_stats& now) {
    bool send = first_ || now.ranks.size() != sent_.size();
    for (auto& r : now.ranks) {
      auto it = sent_.find(r.id);
      send = send || it == sent_.end()
             || std::abs(r.cpu_seconds - it->second.cpu_seconds) >= cpu_step_seconds
             || distance(r.rss_bytes, it->second.rss_bytes) >= rss_step_bytes;
    }
    first_ = false;
    if (!send) {
      wait_ = std::min(wait_ * 2, proto::board_limits::max_sample_interval);
      return false;
    }
    sent_.clear();
    for (auto& r : now.ranks)
      sent_[r.id] = r;
    wait_ = proto::board_limits::sample_interval;
    return true;
  }

  /// How long until the next sample.
  std::chrono::milliseconds next_wait() const {
    return wait_;
  }

private:
  static uint64_t distance(uint64_t a, uint64_t b) {
    return a > b ? a - b : b - a;
  }

  bool first_ = true;
  std::map<int32_t, proto::rank_stat> sent_;
  std::chrono::milliseconds wait_ = proto::board_limits::sample_interval;
};

} // namespace hvactor::detail
