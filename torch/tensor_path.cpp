#include "torch/tensor_path.hpp"

#include <stdexcept>

#include <fmt/format.h>

namespace hvactor::hvd::detail {

std::string device_name(const torch::Tensor& t) {
  return t.device().str();
}

tensor_path path_of(const torch::Tensor& t, const char* call) {
  if (t.device().is_cpu())
    return tensor_path::host;
  if (!t.device().is_cuda())
    throw std::invalid_argument(fmt::format("hvd::{}: rank {}'s tensor is on {}; hvd takes CPU "
                                            "and CUDA tensors",
                                            call, rank(), device_name(t)));
  if (!gpu_available())
    return tensor_path::via_cpu;
  if (t.device().index() != gpu_device())
    throw std::invalid_argument(fmt::format(
      "hvd::{}: rank {}'s tensor is on {} but its GPU collectives run on cuda:{} (local rank {} "
      "modulo the {} visible devices); move the tensor there or set CUDA_VISIBLE_DEVICES",
      call, rank(), device_name(t), gpu_device(), local_rank(), torch::cuda::device_count()));
  return tensor_path::device;
}

} // namespace hvactor::hvd::detail
