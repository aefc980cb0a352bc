#pragma once

// hvactor-bench allreduce | allgather | broadcast: nccl-tests' sweep over
// message sizes through hvd:: in real worker processes, with its columns
// (size count type redop time_us algbw busbw #wrong).

#include <cstdint>
#include <string>
#include <vector>

#include <caf/meta/type_name.hpp>

#include "bench_method.hpp"

namespace hvactor::bench_tool {

/// One rank's measurement of one size.
struct rank_point {
  /// Wall time of the timed loop, and its iterations.
  double loop_us = 0;
  int32_t iters = 0;
  /// Elements that came back wrong in the checked call (--check), else 0.
  int64_t wrong = 0;
  /// Every timed call's duration (rank 0's are reported as samples).
  std::vector<double> samples_us;
  /// hvd::backend_info() of the rank.
  std::string path;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, rank_point& x) {
  return f(caf::meta::type_name("hvactor_bench_rank_point"), x.loop_us, x.iters, x.wrong,
           x.samples_us, x.path);
}

/// Runs in every worker: `kind` ("allreduce", "allgather", "broadcast") of
/// `bytes` (float32; allgather: the gathered total) on host memory, or with
/// `gpu` on device memory, timed as bench_method.hpp says (its peers are
/// timed the same way).
rank_point measure_point(std::string kind, uint64_t bytes, int32_t iters, int32_t warmup,
                         bool check, bool gpu);

/// nccl-tests' bus bandwidth factor (bench_method.hpp).
using bench::bus_factor;

} // namespace hvactor::bench_tool
