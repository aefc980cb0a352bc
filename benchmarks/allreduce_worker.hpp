#pragma once

// What the allreduce benchmark's scenarios run inside every worker (fusion,
// timeline overhead, hierarchical vs flat). The driver calls the members
// through executor::execute and gets every rank's result in rank order.

#include <cstdint>
#include <memory>
#include <string>

#include <caf/meta/type_name.hpp>

#include "bench_method.hpp"

namespace hvactor::bench {

/// One rank's measurement of one size (bench_method.hpp's method).
struct timing {
  /// Wall time of the whole timed loop, microseconds.
  double loop_us = 0;
  /// Timed calls (iterations()).
  int32_t iters = 0;
  /// Median of this rank's per-call times, microseconds.
  double p50_us = 0;
  /// Empty, or what the checked call got wrong.
  std::string error;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, timing& x) {
  return f(caf::meta::type_name("timing"), x.loop_us, x.iters, x.p50_us, x.error);
}

/// One rank's measurement of one size, with the algorithm it ran.
struct size_result {
  timing time;
  /// "ring" or "bcube" (collectives::allreduce_algorithm_policy in this process).
  std::string algorithm;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, size_result& x) {
  return f(caf::meta::type_name("size_result"), x.time, x.algorithm);
}

/// One rank's fusion scenario: medians over the repetitions.
struct fusion_result {
  /// Many synchronous hvd::allreduce calls, one per tensor.
  double separate_us = 0;
  /// One hvd::grouped_allreduce of the same tensors.
  double grouped_us = 0;
  /// Empty, or what the checked grouped call got wrong.
  std::string error;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, fusion_result& x) {
  return f(caf::meta::type_name("fusion_result"), x.separate_us, x.grouped_us, x.error);
}

/// The executable object of the benchmark's workers (executor::start<T>).
class allreduce_worker {
public:
  /// hvd::init(). Returns hvd::rank().
  int hvd_init();

  /// hvd::init() with HOROVOD_TIMELINE set to `timeline` in this process,
  /// or unset when empty. Returns hvd::rank().
  int hvd_init_timeline(std::string timeline);

  /// hvd::backend_info() (after hvd_init).
  std::string hvd_backend_info();

  /// Measures hvd::allreduce (op::sum, in place) at `bytes` (floats); the
  /// result's algorithm is Gloo's, or "shm" / "hierarchical".
  size_result hvd_measure(uint64_t bytes, double budget_ms);

  /// `iters` timed allreduces (op::sum, in place) of `bytes` (floats) after
  /// a warm-up and a barrier: hvd::allreduce, or with `async` != 0
  /// allreduce_async + synchronize (through the engine's thread).
  timing hvd_fixed(uint64_t bytes, int32_t iters, int32_t async);

  /// `tensors` tensors of `bytes` each: synchronous allreduce one by one,
  /// then grouped_allreduce, `reps` times each (after one checked grouped
  /// call and one warm-up of each).
  fusion_result hvd_fusion(int32_t tensors, uint64_t bytes, int32_t reps);

  /// hvd::shutdown(). Returns this rank.
  int hvd_finish();
};

} // namespace hvactor::bench
