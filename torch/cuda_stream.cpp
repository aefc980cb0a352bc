// A CUDA build of LibTorch: the tensor's current stream, as LibTorch's own
// ops use it (c10/cuda/CUDAStream.h).

#include <c10/cuda/CUDAStream.h>

#include "torch/tensor_path.hpp"

namespace hvactor::hvd::detail {

cuda_stream stream_of(const torch::Tensor& t) {
  if (!t.is_cuda())
    return nullptr;
  return reinterpret_cast<cuda_stream>(
    c10::cuda::getCurrentCUDAStream(t.device().index()).stream());
}

} // namespace hvactor::hvd::detail
