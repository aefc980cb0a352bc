// nccl_allreduce: the raw-NCCL peer of `hvactor-bench allreduce --device gpu`.
//
// One process drives every visible GPU (ncclCommInitAll), as nccl-tests'
// all_reduce_perf -g N does; each call is ncclAllReduce on every device
// followed by a synchronize of every stream, so that a call is complete
// when it returns, as hvd::allreduce on device memory is. Same sizes,
// warm-up, call counts and columns as hvactor-bench (bench_method.hpp).
//
//   nccl_allreduce [-b 4] [-e 64M] [-w 5] [--iters N] [--rounds 3] [--gpus N]

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include <cxxopts.hpp>
#include <fmt/format.h>

#include "bench_method.hpp"

namespace bench = hvactor::bench;

namespace {

void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw std::runtime_error(fmt::format("nccl_allreduce: {}: {}", what, cudaGetErrorString(e)));
}

void nccl_ok(ncclResult_t r, const char* what) {
  if (r != ncclSuccess)
    throw std::runtime_error(fmt::format("nccl_allreduce: {}: {}", what, ncclGetErrorString(r)));
}

size_t parse_size(const std::string& s) {
  size_t pos = 0;
  double v = std::stod(s, &pos);
  std::string unit = s.substr(pos);
  double scale = unit.empty() || unit == "B" ? 1
                 : unit == "K" || unit == "KiB" ? 1024.0
                 : unit == "M" || unit == "MiB" ? 1024.0 * 1024
                 : unit == "G" || unit == "GiB" ? 1024.0 * 1024 * 1024
                                                : -1;
  if (scale < 0 || v <= 0)
    throw std::invalid_argument("not a size: '" + s + "' (e.g. 4, 16K, 64M)");
  return static_cast<size_t>(v * scale);
}

/// Every device's communicator, stream and buffer of the largest size.
struct devices {
  std::vector<ncclComm_t> comms;
  std::vector<cudaStream_t> streams;
  std::vector<float*> bufs;

  devices(int n, size_t max_count) : comms(n), streams(n), bufs(n) {
    std::vector<int> ids(n);
    for (int i = 0; i < n; ++i)
      ids[i] = i;
    nccl_ok(ncclCommInitAll(comms.data(), n, ids.data()), "ncclCommInitAll");
    for (int i = 0; i < n; ++i) {
      cuda_ok(cudaSetDevice(i), "cudaSetDevice");
      cuda_ok(cudaStreamCreate(&streams[i]), "cudaStreamCreate");
      cuda_ok(cudaMalloc(&bufs[i], max_count * sizeof(float)), "cudaMalloc");
    }
  }
  ~devices() {
    for (size_t i = 0; i < comms.size(); ++i) {
      cudaSetDevice(static_cast<int>(i));
      cudaFree(bufs[i]);
      cudaStreamDestroy(streams[i]);
      ncclCommDestroy(comms[i]);
    }
  }

  /// One complete allreduce (sum, in place) of `count` floats on every device.
  void allreduce(size_t count) {
    nccl_ok(ncclGroupStart(), "ncclGroupStart");
    for (size_t i = 0; i < comms.size(); ++i)
      nccl_ok(ncclAllReduce(bufs[i], bufs[i], count, ncclFloat, ncclSum, comms[i], streams[i]),
              "ncclAllReduce");
    nccl_ok(ncclGroupEnd(), "ncclGroupEnd");
    for (size_t i = 0; i < comms.size(); ++i) {
      cuda_ok(cudaSetDevice(static_cast<int>(i)), "cudaSetDevice");
      cuda_ok(cudaStreamSynchronize(streams[i]), "cudaStreamSynchronize");
    }
  }

  /// The checked call: rank i contributes check_value(i, k); true when every
  /// device holds the exact sum afterwards.
  bool check(size_t count) {
    int n = static_cast<int>(comms.size());
    std::vector<float> host(count);
    for (int i = 0; i < n; ++i) {
      bench::fill_check(host.data(), count, i);
      cuda_ok(cudaSetDevice(i), "cudaSetDevice");
      cuda_ok(cudaMemcpy(bufs[i], host.data(), count * sizeof(float), cudaMemcpyHostToDevice),
              "cudaMemcpy");
    }
    allreduce(count);
    for (int i = 0; i < n; ++i) {
      cuda_ok(cudaSetDevice(i), "cudaSetDevice");
      cuda_ok(cudaMemcpy(host.data(), bufs[i], count * sizeof(float), cudaMemcpyDeviceToHost),
              "cudaMemcpy");
      if (bench::count_wrong("allreduce", host, {}, count, n) != 0)
        return false;
    }
    return true;
  }
};

int run(int argc, char** argv) {
  cxxopts::Options opts("nccl_allreduce", "raw NCCL all-reduce, the peer of hvactor-bench --device gpu");
  opts.add_options()("b,minbytes", "smallest message", cxxopts::value<std::string>()->default_value("4"))(
      "e,maxbytes", "largest message", cxxopts::value<std::string>()->default_value("64M"))(
      "w,warmup", "warm-up calls per size", cxxopts::value<int>()->default_value("5"))(
      "iters", "timed calls per size (default: hvactor-bench's time budget)",
      cxxopts::value<int>()->default_value("0"))(
      "rounds", "rounds over every size", cxxopts::value<int>()->default_value("3"))(
      "gpus", "devices (default: every visible one)", cxxopts::value<int>()->default_value("0"))(
      "h,help", "this text");
  auto o = opts.parse(argc, argv);
  if (o.count("help")) {
    std::puts(opts.help().c_str());
    return 0;
  }
  int visible = 0;
  cuda_ok(cudaGetDeviceCount(&visible), "cudaGetDeviceCount");
  int n = o["gpus"].as<int>() > 0 ? o["gpus"].as<int>() : visible;
  if (n > visible)
    throw std::invalid_argument(fmt::format("--gpus {}: only {} visible", n, visible));
  auto sizes = bench::message_sizes(parse_size(o["minbytes"].as<std::string>()),
                                    parse_size(o["maxbytes"].as<std::string>()));
  int rounds = o["rounds"].as<int>();
  devices d(n, sizes.back() / sizeof(float));
  int nccl_version = 0;
  ncclGetVersion(&nccl_version);
  cudaDeviceProp prop{};
  cuda_ok(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  fmt::print("# raw NCCL {} all-reduce, {} x {}, {} rounds, in place, float sum\n", nccl_version,
             n, prop.name, rounds);
  fmt::print("{:>12} {:>8} {:>12} {:>28} {:>10} {:>10}\n", "size(B)", "iters", "time(us)",
             "rounds (us)", "algbw GB/s", "busbw GB/s");
  for (size_t bytes : sizes) {
    size_t count = bytes / sizeof(float);
    if (!d.check(count))
      throw std::runtime_error(fmt::format("nccl_allreduce: wrong sum at {} B", bytes));
    int iters = o["iters"].as<int>() > 0 ? o["iters"].as<int>() : bench::iterations(bytes, 1000);
    std::vector<double> per_round;
    for (int r = 0; r < rounds; ++r) {
      auto t = bench::measure_calls(o["warmup"].as<int>(), iters, [&] { d.allreduce(count); },
                                    [] {});
      per_round.push_back(t.loop_us / iters);
    }
    double us = bench::median(per_round);
    double algbw = static_cast<double>(bytes) / us / 1e3;
    std::string spread;
    for (double v : per_round)
      spread += fmt::format("{}{:.2f}", spread.empty() ? "" : ", ", v);
    fmt::print("{:>12} {:>8} {:>12.2f} {:>28} {:>10.2f} {:>10.2f}\n", bytes, iters, us, spread,
               algbw, algbw * bench::bus_factor("allreduce", n));
  }
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
