#pragma once

// Private to the LibTorch adapter: where a tensor's collective runs, as
// Horovod's torch ops choose it (horovod/torch/mpi_ops_v2.cc):
//   host     a CPU tensor: hvd's host collectives (shared memory, Gloo);
//   device   a CUDA tensor when hvd::init gave this job a device backend
//            (NCCL, or hvd's host-staged path when ranks share a GPU): on
//            the tensor's GPU, ordered after the work queued on the
//            tensor's current CUDA stream;
//   via_cpu  a CUDA tensor when the job has no device backend (hvactor
//            built without CUDA/NCCL, or a rank without a GPU): through a
//            CPU copy made here and copied back after, as Horovod's
//            DoAllreduceCudaOnCPU does.

#include <functional>
#include <vector>

#include <torch/torch.h>

#include "hvactor/hvd.hpp"

namespace hvactor::hvd::detail {

enum class tensor_path { host, device, via_cpu };

/// The path of `t` for `call` (e.g. "allreduce"). Throws
/// std::invalid_argument naming the call, the rank and the devices for a
/// CUDA tensor on another GPU than the one hvd's device collectives run on
/// (hvd::gpu_device()), and for a tensor that is on neither the CPU nor a
/// CUDA device.
tensor_path path_of(const torch::Tensor& t, const char* call);

/// The current CUDA stream of `t`'s device (cuda_stream.cpp: LibTorch's
/// c10::cuda::getCurrentCUDAStream); nullptr for a CPU tensor.
cuda_stream stream_of(const torch::Tensor& t);

/// Allocates like torch::empty(shape, options) from any thread as the
/// calling thread would now: a CUDA block then belongs to the caller's
/// current stream in LibTorch's caching allocator (cuda_stream.cpp), as a
/// result hvd's engine thread allocates for the caller should.
using tensor_allocator = std::function<torch::Tensor(const std::vector<int64_t>& shape)>;
tensor_allocator allocator_here(const torch::TensorOptions& options);

/// "cuda:1" or "cpu".
std::string device_name(const torch::Tensor& t);

} // namespace hvactor::hvd::detail
