#include "allreduce_worker.hpp"

#include <stdlib.h>

#include <chrono>
#include <cstdlib>
#include <span>
#include <stdexcept>
#include <vector>

#include "collectives/backends/allreduce_algorithm.hpp"
#include <hvactor/hvd.hpp>


namespace hvd = hvactor::hvd;

namespace hvactor::bench {

namespace {

/// The policy hvd::init builds, forced the same way, so that the reported
/// algorithm is the one hvactor runs (read once per size, not per call).
collectives::allreduce_algorithm_policy algorithm_policy() {
  constexpr const char* forced = "HVACTOR_GLOO_ALLREDUCE";
  const char* value = std::getenv(forced);
  return collectives::allreduce_algorithm_policy::parse(value ? value : "", forced);
}

/// Empty when the checked allreduce (float sum of fill_check's values)
/// came back right; otherwise the first wrong element and how many.
std::string check_message(const std::vector<float>& data, int ranks) {
  size_t first = 0;
  auto wrong = count_wrong("allreduce", data, {}, data.size(), ranks, &first);
  if (wrong == 0)
    return {};
  float expected = 0;
  for (int r = 0; r < ranks; ++r)
    expected += check_value(r, first);
  return "element " + std::to_string(first) + " is " + std::to_string(data[first])
         + ", expected " + std::to_string(expected) + " (" + std::to_string(wrong) + " of "
         + std::to_string(data.size()) + " elements wrong)";
}

/// The timed part of a timing: `iters` calls after `barrier`.
template <class Run>
timing timed_after_barrier(int iters, Run&& run) {
  hvd::barrier();
  auto t = timed_calls(iters, run);
  timing out;
  out.iters = iters;
  out.loop_us = t.loop_us;
  out.p50_us = quantile(std::move(t.samples_us), 0.5);
  return out;
}

} // namespace

int allreduce_worker::hvd_init() {
  hvd::init();
  return hvd::rank();
}

int allreduce_worker::hvd_init_timeline(std::string timeline) {
  if (timeline.empty())
    ::unsetenv("HOROVOD_TIMELINE");
  else
    ::setenv("HOROVOD_TIMELINE", timeline.c_str(), 1);
  return hvd_init();
}

std::string allreduce_worker::hvd_backend_info() {
  return hvd::backend_info();
}

size_result allreduce_worker::hvd_measure(uint64_t bytes, double budget_ms) {
  auto algorithm = algorithm_policy().choose(bytes, hvd::size());
  // The path hvd::allreduce takes ("allreduce: shm, ..."): Gloo's
  // algorithm matters only on the Gloo path.
  auto info = hvd::backend_info();
  auto path = info.substr(11, info.find(',') - 11);
  std::vector<float> buf(bytes / sizeof(float));
  auto reduce = [&buf] { hvd::allreduce(std::span<float>{buf}, hvd::op::sum); };
  // One checked call, one warm-up, then the timed calls (bench_method.hpp).
  fill_check(buf, hvd::rank());
  reduce();
  auto error = check_message(buf, hvd::size());
  warm_up(1, reduce);
  auto out = timed_after_barrier(iterations(bytes, budget_ms), reduce);
  out.error = std::move(error);
  return {out, path == "gloo" ? collectives::to_string(algorithm) : path};
}

timing allreduce_worker::hvd_fixed(uint64_t bytes, int32_t iters, int32_t async) {
  std::vector<float> buf(bytes / sizeof(float));
  std::span<float> x{buf};
  auto reduce = [&] {
    if (async == 0) {
      hvd::allreduce(x, hvd::op::sum);
    } else {
      auto h = hvd::allreduce_async(x, hvd::op::sum, "bench");
      hvd::synchronize(h);
    }
  };
  warm_up(10, reduce);
  return timed_after_barrier(iters, reduce);
}

fusion_result allreduce_worker::hvd_fusion(int32_t tensors, uint64_t bytes, int32_t reps) {
  size_t count = bytes / sizeof(float);
  std::vector<std::vector<float>> bufs(static_cast<size_t>(tensors), std::vector<float>(count));
  std::vector<std::span<float>> spans(bufs.begin(), bufs.end());
  fusion_result out;
  for (auto& b : bufs)
    fill_check(b, hvd::rank());
  hvd::grouped_allreduce(spans, hvd::op::sum);
  for (size_t i = 0; i < bufs.size() && out.error.empty(); ++i)
    if (auto err = check_message(bufs[i], hvd::size()); !err.empty())
      out.error = "tensor " + std::to_string(i) + ": " + err;
  auto separate = [&] {
    for (auto& s : spans)
      hvd::allreduce(s, hvd::op::sum);
  };
  auto grouped = [&] { hvd::grouped_allreduce(spans, hvd::op::sum); };
  separate(); // warm-up
  grouped();
  std::vector<double> separate_us, grouped_us;
  for (int i = 0; i < reps; ++i) {
    hvd::barrier();
    auto t0 = clock_type::now();
    separate();
    separate_us.push_back(us_between(t0, clock_type::now()));
    hvd::barrier();
    t0 = clock_type::now();
    grouped();
    grouped_us.push_back(us_between(t0, clock_type::now()));
  }
  out.separate_us = quantile(std::move(separate_us), 0.5);
  out.grouped_us = quantile(std::move(grouped_us), 0.5);
  return out;
}

int allreduce_worker::hvd_finish() {
  int rank = hvd::rank();
  hvd::shutdown();
  return rank;
}

} // namespace hvactor::bench
