#include "allreduce_gpu.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>

#include <fmt/format.h>
#include "internal/devices.hpp"
#include <hvactor/hvactor.hpp>

#ifdef HVACTOR_BENCH_CUDA
#include <cuda_runtime.h>
#include <nccl.h>
#endif

namespace hvd = hvactor::hvd;

namespace {

using clock_type = std::chrono::steady_clock;

#ifdef HVACTOR_BENCH_CUDA

// HVACTOR_BENCH_DISTINCT_HOSTID=1 gives every rank its own NCCL_HOSTID, so
// that NCCL < 2.30 accepts two ranks on one GPU (notes/collectives.md s4).
void maybe_distinct_hostid() {
  const char* v = std::getenv("HVACTOR_BENCH_DISTINCT_HOSTID");
  if (v && std::string{v} == "1")
    ::setenv("NCCL_HOSTID", fmt::format("hvactor-rank-{}", std::getenv("HOROVOD_RANK")).c_str(), 1);
}

/// Device name, driver, NCCL version, chosen backend.
std::vector<std::string> gpu_info() {
  maybe_distinct_hostid();
  hvd::init();
  int dev = 0, driver = 0, runtime = 0, nccl = 0;
  cudaGetDevice(&dev);
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, dev);
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  ncclGetVersion(&nccl);
  std::vector<std::string> out{prop.name, std::to_string(driver), std::to_string(runtime),
                               std::to_string(nccl), hvd::gpu_backend()};
  hvd::shutdown();
  return out;
}

/// Mean microseconds per allreduce (float32, sum) for each size, device
/// memory then host memory: [dev0, host0, dev1, host1, ...].
std::vector<double> time_sizes(std::vector<int64_t> sizes, double budget_ms) {
  maybe_distinct_hostid();
  hvd::init();
  auto largest = static_cast<size_t>(*std::max_element(sizes.begin(), sizes.end()));
  float* d = nullptr;
  cudaMalloc(&d, largest);
  cudaMemset(d, 0, largest);
  std::vector<float> h(largest / sizeof(float) + 1, 0.0f);
  std::vector<double> out;
  for (auto bytes : sizes) {
    auto count = static_cast<size_t>(bytes) / sizeof(float);
    auto measure = [&](auto&& op) {
      for (int i = 0; i < 3; ++i)
        op();
      // Every rank runs the same iterations: rank 0's estimate is broadcast.
      auto t0 = clock_type::now();
      op();
      double one = std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
      std::vector<double> iters{std::clamp(budget_ms / std::max(one, 1e-3), 5.0, 10000.0)};
      hvd::broadcast(std::span<double>(iters), 0);
      auto n = static_cast<int>(iters[0]);
      hvd::barrier();
      t0 = clock_type::now();
      for (int i = 0; i < n; ++i)
        op();
      return std::chrono::duration<double, std::micro>(clock_type::now() - t0).count() / n;
    };
    out.push_back(measure(
      [&] { hvd::allreduce(hvd::device_span<float>{d, count}, hvd::op::sum, nullptr); }));
    out.push_back(
      measure([&] { hvd::allreduce(std::span<float>(h.data(), count), hvd::op::sum); }));
  }
  cudaFree(d);
  hvd::shutdown();
  return out;
}

#endif

} // namespace

int run_gpu_benchmark(hvactor::runtime& rt, const std::vector<int>& nps, size_t min_bytes,
                      size_t max_bytes, double budget_ms) {
#ifndef HVACTOR_BENCH_CUDA
  (void)rt, (void)nps, (void)min_bytes, (void)max_bytes, (void)budget_ms;
  fmt::print("# allreduce --gpu: this build has no CUDA/NCCL; nothing measured\n");
  return 0;
#else
  auto probe = hvactor::collectives::probe_devices();
  if (probe.count == 0) {
    fmt::print("# allreduce --gpu: no CUDA device here ({}); nothing measured\n", probe.reason);
    return 0;
  }
  std::vector<int64_t> sizes;
  for (size_t b = std::max<size_t>(min_bytes, 4); b <= max_bytes; b *= 4)
    sizes.push_back(static_cast<int64_t>(b));
  for (int n : nps) {
    // No use_gpu: on a one-GPU machine every rank shares device 0, which is
    // exactly the multi-rank case this mode measures.
    hvactor::executor ex{rt, hvactor::executor::create_settings({}), {.num_workers = n}};
    ex.start();
    auto info = ex.run(&gpu_info).front();
    fmt::print("# N={}: device {}, driver {}, CUDA runtime {}, NCCL {}, backend: {}\n", n,
               info[0], info[1], info[2], info[3], info[4]);
    auto times = ex.run(&time_sizes, sizes, budget_ms).front();
    ex.shutdown();
    fmt::print("{:>12} {:>10} {:>6} {:>10} {:>8} {:>8} {:>12} {:>8} {:>10}\n", "size", "count",
               "type", "time_us", "algbw", "busbw", "host_us", "host_bw", "dev/host");
    for (size_t i = 0; i < sizes.size(); ++i) {
      double dev = times[2 * i], host = times[2 * i + 1];
      double algbw = static_cast<double>(sizes[i]) / dev / 1e3; // GB/s
      double bus = n > 1 ? algbw * 2.0 * (n - 1) / n : algbw;
      double host_bus = (n > 1 ? 2.0 * (n - 1) / n : 1.0) * static_cast<double>(sizes[i]) / host
                        / 1e3;
      fmt::print("{:>12} {:>10} {:>6} {:>10.1f} {:>8.2f} {:>8.2f} {:>12.1f} {:>8.2f} {:>10.2f}\n",
                 sizes[i], sizes[i] / 4, "float", dev, algbw, bus, host, host_bus, dev / host);
    }
  }
  return 0;
#endif
}
