// A CUDA build of LibTorch: the tensor's current stream, as LibTorch's own
// ops use it (c10/cuda/CUDAStream.h), and allocations made for it.

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "torch/tensor_path.hpp"

namespace hvactor::hvd::detail {

cuda_stream stream_of(const torch::Tensor& t) {
  if (!t.is_cuda())
    return nullptr;
  return reinterpret_cast<cuda_stream>(
    c10::cuda::getCurrentCUDAStream(t.device().index()).stream());
}

tensor_allocator allocator_here(const torch::TensorOptions& options) {
  if (!options.device().is_cuda())
    return [options](const std::vector<int64_t>& shape) { return torch::empty(shape, options); };
  auto stream = c10::cuda::getCurrentCUDAStream(options.device().index());
  return [options, stream](const std::vector<int64_t>& shape) {
    c10::cuda::CUDAStreamGuard guard(stream);
    return torch::empty(shape, options);
  };
}

} // namespace hvactor::hvd::detail
