#pragma once

// Internal: the moments of a static job's start in this process, for
// hvactor-bench scale (tools/hvactor_bench/scale/scale.cpp), which splits the
// time from executor::start() to every rank's hvd::init() into phases.
// Wall-clock nanoseconds since the epoch (every process of an emulated
// cluster reads the same clock); 0 until noted. The driver's coordinator
// notes placed, spawned and all_registered; a worker notes registered and
// env_set. Each is overwritten by the next job in the process; nothing
// reads them but the benchmark.

#include <atomic>
#include <chrono>
#include <cstdint>

namespace hvactor::detail::start_marks {

/// Driver: every node of the plan reserved (placement done).
inline std::atomic<int64_t> placed_ns{0};
/// Driver: the binary reached the nodes; the colocate requests go out.
inline std::atomic<int64_t> spawned_ns{0};
/// Driver: every rank registered; the Horovod environment goes out.
inline std::atomic<int64_t> all_registered_ns{0};
/// Worker: the driver accepted this worker's registration.
inline std::atomic<int64_t> registered_ns{0};
/// Worker: its Horovod environment arrived.
inline std::atomic<int64_t> env_set_ns{0};

inline int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
           std::chrono::system_clock::now().time_since_epoch())
    .count();
}

inline void note(std::atomic<int64_t>& mark) {
  mark.store(now_ns(), std::memory_order_relaxed);
}

} // namespace hvactor::detail::start_marks
