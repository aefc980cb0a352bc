#pragma once

// Benchmark helper for scheduler_sim: a node agent over fake resources that
// implements proto::node_agent in-process (node_info.port 0), so that the
// real registry and coordinator can be driven with thousands of nodes.

#include <atomic>
#include <chrono>
#include <cstdint>

#include <caf/actor_system.hpp>

#include "actors/protocol/interfaces.hpp"

namespace hvactor::bench {

/// steady_clock now, in nanoseconds since its epoch.
int64_t now_ns();

/// What the simulated agents report to the measuring thread.
struct sim_stats {
  std::atomic<int> colocates{0};
  /// now_ns() of the latest colocate received.
  std::atomic<int64_t> last_colocate_ns{0};

  void reset();

  /// Counts one colocate, now.
  void record();
};

/// Spawns an agent offering `info.total` with `info.free` free: info;
/// reserve all-or-nothing on free CPUs/GPUs; release; colocate records the
/// time in `stats` and answers a colocator that starts nothing (it answers
/// stop with true and quits); has_bin, put_bin, join, stop, expire answer
/// trivially. With `updates`, it sends update_atom to `registry` on every
/// change of its free resources, as the real agent does. `stats` must
/// outlive the agent.
proto::node_agent spawn_sim_node_agent(caf::actor_system& sys, proto::node_info info,
                                       sim_stats* stats, proto::node_registry registry,
                                       bool updates);

} // namespace hvactor::bench
