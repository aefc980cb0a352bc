#pragma once

// The models of hvactor-bench train, written with LibTorch modules:
// ResNet-50 (torchvision's resnet50: Bottleneck blocks [3, 4, 6, 3],
// 25,557,032 parameters at 1000 classes) and a small MLP.

#include <string>

#include <torch/torch.h>

namespace hvactor::bench_tool {

/// A model of `name` ("resnet50" or "mlp") as a Module with its forward.
struct model {
  std::shared_ptr<torch::nn::Module> module;
  std::function<torch::Tensor(const torch::Tensor&)> forward;
  /// One sample's shape (without the batch dimension) and the classes.
  std::vector<int64_t> input_shape;
  int64_t classes = 0;
};

model make_model(const std::string& name, int64_t image_size);

/// The side of ResNet-50's last feature map for square inputs of `image_size`.
int64_t resnet50_final_side(int64_t image_size);

} // namespace hvactor::bench_tool
