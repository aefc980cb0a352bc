#include "allreduce_worker.hpp"

#include <stdlib.h>

#include <chrono>
#include <cstdlib>
#include <span>
#include <stdexcept>
#include <vector>

#include "internal/algorithm.hpp"
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
  auto reduce = [](float* data, size_t count) {
    hvd::allreduce(std::span<float>{data, count}, hvd::op::sum);
  };
  auto barrier = [] { hvd::barrier(); };
  return {measure(reduce, barrier, buf.data(), buf.size(), hvd::rank(), hvd::size(), budget_ms),
          path == "gloo" ? collectives::to_string(algorithm) : path};
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
  for (int i = 0; i < 10; ++i) // warm-up
    reduce();
  timing out;
  out.iters = iters;
  std::vector<double> per_call;
  per_call.reserve(static_cast<size_t>(iters));
  hvd::barrier();
  auto start = clock_type::now();
  auto t0 = start;
  for (int i = 0; i < iters; ++i) {
    reduce();
    auto t1 = clock_type::now();
    per_call.push_back(us_between(t0, t1));
    t0 = t1;
  }
  out.loop_us = us_between(start, t0);
  out.p50_us = percentile(std::move(per_call), 0.5);
  return out;
}

fusion_result allreduce_worker::hvd_fusion(int32_t tensors, uint64_t bytes, int32_t reps) {
  size_t count = bytes / sizeof(float);
  std::vector<std::vector<float>> bufs(static_cast<size_t>(tensors), std::vector<float>(count));
  std::vector<std::span<float>> spans(bufs.begin(), bufs.end());
  fusion_result out;
  for (auto& b : bufs)
    fill_for_check(b.data(), b.size(), hvd::rank());
  hvd::grouped_allreduce(spans, hvd::op::sum);
  for (size_t i = 0; i < bufs.size() && out.error.empty(); ++i)
    if (auto err = check_sum(bufs[i].data(), bufs[i].size(), hvd::size()); !err.empty())
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
  out.separate_us = percentile(std::move(separate_us), 0.5);
  out.grouped_us = percentile(std::move(grouped_us), 0.5);
  return out;
}

int allreduce_worker::hvd_finish() {
  int rank = hvd::rank();
  hvd::shutdown();
  return rank;
}

} // namespace hvactor::bench
