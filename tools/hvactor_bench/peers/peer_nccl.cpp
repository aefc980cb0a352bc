// The raw NCCL peer of `hvactor-bench --device gpu`: `hvactor-bench
// __peer-nccl --size N ...` is one process driving N GPUs of this machine
// (ncclCommInitAll), as nccl-tests' all_reduce_perf -g N does. A call is
// the NCCL collective on every GPU, grouped, then a synchronize of every
// stream: complete when it returns, as hvd's device calls are. It measures
// as every peer (peer_protocol.hpp) and prints rank 0's point line.

#include <cuda_runtime.h>
#include <nccl.h>

#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "tools/hvactor_bench/peers/peer.hpp"
#include "tools/hvactor_bench/peers/peer_protocol.hpp"

namespace hvactor::bench_tool {

namespace {

void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw std::runtime_error(fmt::format("--peer nccl: {}: {}", what, cudaGetErrorString(e)));
}

void nccl_ok(ncclResult_t r, const char* what) {
  if (r != ncclSuccess)
    throw std::runtime_error(fmt::format("--peer nccl: {}: {}", what, ncclGetErrorString(r)));
}

/// One communicator, stream and pair of buffers per GPU.
class gpus {
public:
  gpus(int n, size_t count, size_t out_count) : comms_(n), streams_(n), in_(n), out_(n) {
    std::vector<int> ids(n);
    for (int i = 0; i < n; ++i)
      ids[i] = i;
    nccl_ok(ncclCommInitAll(comms_.data(), n, ids.data()), "ncclCommInitAll");
    for (int i = 0; i < n; ++i) {
      cuda_ok(cudaSetDevice(i), "cudaSetDevice");
      cuda_ok(cudaStreamCreateWithFlags(&streams_[i], cudaStreamNonBlocking), "cudaStreamCreate");
      cuda_ok(cudaMalloc(&in_[i], std::max<size_t>(count, 1) * sizeof(float)), "cudaMalloc");
      cuda_ok(cudaMalloc(&out_[i], std::max<size_t>(out_count, 1) * sizeof(float)), "cudaMalloc");
      cuda_ok(cudaMemset(in_[i], 0, std::max<size_t>(count, 1) * sizeof(float)), "cudaMemset");
    }
  }
  ~gpus() {
    for (size_t i = 0; i < comms_.size(); ++i) {
      cudaSetDevice(static_cast<int>(i));
      cudaFree(in_[i]);
      cudaFree(out_[i]);
      cudaStreamDestroy(streams_[i]);
      ncclCommDestroy(comms_[i]);
    }
  }
  gpus(const gpus&) = delete;
  gpus& operator=(const gpus&) = delete;

  /// One complete collective of `count` floats per GPU.
  void run(const std::string& kind, size_t count) {
    nccl_ok(ncclGroupStart(), "ncclGroupStart");
    for (size_t i = 0; i < comms_.size(); ++i) {
      if (kind == "allreduce")
        nccl_ok(ncclAllReduce(in_[i], in_[i], count, ncclFloat, ncclSum, comms_[i], streams_[i]),
                "ncclAllReduce");
      else if (kind == "broadcast")
        nccl_ok(ncclBroadcast(in_[i], in_[i], count, ncclFloat, 0, comms_[i], streams_[i]),
                "ncclBroadcast");
      else
        nccl_ok(ncclAllGather(in_[i], out_[i], count, ncclFloat, comms_[i], streams_[i]),
                "ncclAllGather");
    }
    nccl_ok(ncclGroupEnd(), "ncclGroupEnd");
    for (size_t i = 0; i < comms_.size(); ++i) {
      cuda_ok(cudaSetDevice(static_cast<int>(i)), "cudaSetDevice");
      cuda_ok(cudaStreamSynchronize(streams_[i]), "cudaStreamSynchronize");
    }
  }

  /// The checked call: GPU i is rank i; wrong elements on all GPUs.
  int64_t check(const std::string& kind, size_t count) {
    int n = static_cast<int>(comms_.size());
    std::vector<float> in(count), out(kind == "allgather" ? count * n : 0);
    for (int i = 0; i < n; ++i) {
      fill_check(in, i);
      cuda_ok(cudaSetDevice(i), "cudaSetDevice");
      cuda_ok(cudaMemcpy(in_[i], in.data(), count * sizeof(float), cudaMemcpyHostToDevice),
              "cudaMemcpy");
    }
    run(kind, count);
    int64_t wrong = 0;
    for (int i = 0; i < n; ++i) {
      cuda_ok(cudaSetDevice(i), "cudaSetDevice");
      cuda_ok(cudaMemcpy(in.data(), in_[i], count * sizeof(float), cudaMemcpyDeviceToHost),
              "cudaMemcpy");
      if (!out.empty())
        cuda_ok(cudaMemcpy(out.data(), out_[i], out.size() * sizeof(float),
                           cudaMemcpyDeviceToHost),
                "cudaMemcpy");
      wrong += count_wrong(kind, in, out, count, n);
    }
    return wrong;
  }

private:
  std::vector<ncclComm_t> comms_;
  std::vector<cudaStream_t> streams_;
  std::vector<float*> in_, out_;
};

} // namespace

int run_nccl_peer(int argc, char** argv) {
  auto a = parse_peer_args(argc, argv, 2);
  int visible = 0;
  cuda_ok(cudaGetDeviceCount(&visible), "cudaGetDeviceCount");
  if (a.size > visible)
    throw std::runtime_error(fmt::format("--peer nccl: {} ranks need a GPU each (NCCL refuses two "
                                         "ranks on one GPU) and this machine has {}",
                                         a.size, visible));
  // One communicator per GPU for the whole job, buffers for the largest
  // size; every size runs on the front of them.
  size_t most = 0;
  for (auto& s : a.sizes)
    most = std::max<size_t>(most, peer_count(peer_args{a.kind, s.bytes}, a.size));
  gpus g(a.size, most, a.kind == "allgather" ? most * static_cast<size_t>(a.size) : 0);
  for_each_size(a, [&] {
    size_t count = peer_count(a, a.size);
    int64_t wrong = a.check ? g.check(a.kind, count) : 0;
    auto timed = bench::measure_calls(a.warmup, a.iters, [&] { g.run(a.kind, count); }, [] {});
    print_point(a, timed.loop_us, wrong, timed.samples_us);
  });
  return 0;
}

} // namespace hvactor::bench_tool
