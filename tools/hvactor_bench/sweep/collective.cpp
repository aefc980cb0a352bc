#include "tools/hvactor_bench/sweep/collective.hpp"

#include <stdexcept>

#include <hvactor/hvactor.hpp>

#include "tools/hvactor_bench/peers/peer_protocol.hpp"

#ifdef HVACTOR_BENCH_CUDA
#include <cuda_runtime.h>
#endif

namespace hvactor::bench_tool {

namespace hvd = hvactor::hvd;

namespace {

/// One collective on host memory, as peer_protocol.hpp describes it.
struct host_buffers {
  const peer_args& a;
  std::vector<float> in, out;

  void run() {
    if (a.kind == "allreduce")
      hvd::allreduce(std::span<float>(in), hvd::op::sum);
    else if (a.kind == "broadcast")
      hvd::broadcast(std::span<float>(in), 0);
    else
      hvd::allgather(std::span<const float>(in), std::span<float>(out));
  }
  int64_t check(int rank, int size) {
    fill_check(in, rank);
    run();
    return count_wrong(a.kind, in, out, in.size(), size);
  }
};

#ifdef HVACTOR_BENCH_CUDA

void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string{"hvactor-bench --device gpu: "} + what + ": "
                             + cudaGetErrorString(e));
}

/// The same on device memory (hvd_device.hpp's calls return when the result
/// is in place; the check copies through the host).
struct device_buffers {
  const peer_args& a;
  size_t count = 0, out_count = 0;
  float *in = nullptr, *out = nullptr;

  device_buffers(const peer_args& args, size_t n, int size) : a(args), count(n) {
    out_count = a.kind == "allgather" ? count * static_cast<size_t>(size) : 0;
    cuda_ok(cudaMalloc(&in, std::max<size_t>(count, 1) * sizeof(float)), "cudaMalloc");
    cuda_ok(cudaMalloc(&out, std::max<size_t>(out_count, 1) * sizeof(float)), "cudaMalloc");
    cuda_ok(cudaMemset(in, 0, std::max<size_t>(count, 1) * sizeof(float)), "cudaMemset");
  }
  ~device_buffers() {
    cudaFree(in);
    cudaFree(out);
  }
  device_buffers(const device_buffers&) = delete;
  device_buffers& operator=(const device_buffers&) = delete;

  void run() {
    if (a.kind == "allreduce")
      hvd::allreduce(hvd::device_span<float>{in, count}, hvd::op::sum, nullptr);
    else if (a.kind == "broadcast")
      hvd::broadcast(hvd::device_span<float>{in, count}, 0, nullptr);
    else
      hvd::allgather(hvd::device_span<const float>{in, count}, hvd::device_span<float>{out, out_count},
                     nullptr);
  }
  int64_t check(int rank, int size) {
    std::vector<float> h(count), hout(out_count);
    fill_check(h, rank);
    cuda_ok(cudaMemcpy(in, h.data(), count * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy");
    run();
    cuda_ok(cudaMemcpy(h.data(), in, count * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy");
    cuda_ok(cudaMemcpy(hout.data(), out, out_count * sizeof(float), cudaMemcpyDeviceToHost),
            "cudaMemcpy");
    return count_wrong(a.kind, h, hout, count, size);
  }
};

#endif

template <class Buffers>
rank_point measure(Buffers& b, const peer_args& a, int rank, int size) {
  rank_point p;
  p.path = hvd::backend_info();
  if (a.check)
    p.wrong = b.check(rank, size);
  auto timed = bench::measure_calls(a.warmup, a.iters, [&] { b.run(); }, [] { hvd::barrier(); });
  p.loop_us = timed.loop_us;
  p.samples_us = thin_samples(timed.samples_us);
  p.iters = a.iters;
  return p;
}

} // namespace

rank_point measure_point(std::string kind, uint64_t bytes, int32_t iters, int32_t warmup,
                         bool check, bool gpu) {
  if (kind != "allreduce" && kind != "allgather" && kind != "broadcast")
    throw std::invalid_argument("hvactor-bench: unknown collective '" + kind + "'");
  hvd::init();
  peer_args a{kind, bytes, iters, warmup, check};
  size_t count = peer_count(a, hvd::size());
  if (!gpu) {
    // allgather into a buffer allocated once, as the peers do.
    host_buffers b{a, std::vector<float>(count, 1.0f),
                   std::vector<float>(a.kind == "allgather" ? count * static_cast<size_t>(hvd::size()) : 0)};
    return measure(b, a, hvd::rank(), hvd::size());
  }
#ifdef HVACTOR_BENCH_CUDA
  if (!hvd::gpu_available())
    throw std::runtime_error("hvactor-bench --device gpu: rank " + std::to_string(hvd::rank())
                             + " has no device backend (" + hvd::gpu_backend() + ")");
  device_buffers b{a, count, hvd::size()};
  auto p = measure(b, a, hvd::rank(), hvd::size());
  p.path = "device: " + hvd::gpu_backend() + "; host: " + p.path;
  return p;
#else
  throw std::runtime_error("hvactor-bench --device gpu: this build has no CUDA/NCCL");
#endif
}

} // namespace hvactor::bench_tool
