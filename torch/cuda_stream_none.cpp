// A LibTorch without CUDA (Debian's): no CUDA tensor can exist, so no
// stream is ever asked for.

#include <stdexcept>

#include "torch/tensor_path.hpp"

namespace hvactor::hvd::detail {

cuda_stream stream_of(const torch::Tensor& t) {
  if (t.is_cuda())
    throw std::logic_error("hvactor_torch: a CUDA tensor, but this adapter was built against a "
                           "LibTorch without CUDA");
  return nullptr;
}

tensor_allocator allocator_here(const torch::TensorOptions& options) {
  return [options](const std::vector<int64_t>& shape) { return torch::empty(shape, options); };
}

} // namespace hvactor::hvd::detail
