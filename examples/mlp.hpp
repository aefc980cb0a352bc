#pragma once

// The quickstart's model and data, shared by quickstart.cpp and
// spmd_train.cpp: a 1 -> 15 -> 1 MLP that learns y = x + 1 on
// x = 0..31 (inputs and targets scaled by 1/32 so plain SGD at lr 0.1 is
// stable).

#include <torch/torch.h>

#include <vector>

namespace quickstart {

inline constexpr int num_items = 32;
inline constexpr int batch_size = 32;
inline constexpr float scale = 32.0f;

inline torch::nn::Sequential make_model() {
  return torch::nn::Sequential(torch::nn::Linear(1, 15), torch::nn::ReLU(),
                               torch::nn::Linear(15, 1));
}

/// This rank's shard: item i goes to rank i % size. Returns {inputs,
/// targets}, each of shape [n, 1].
inline std::pair<torch::Tensor, torch::Tensor> shard(int rank, int size) {
  std::vector<float> xs, ys;
  for (int i = 0; i < num_items; ++i)
    if (i % size == rank) {
      float x = static_cast<float>(i);
      xs.push_back(x / scale);
      ys.push_back((x + 1.0f) / scale);
    }
  auto n = static_cast<int64_t>(xs.size());
  return {torch::tensor(xs).reshape({n, 1}), torch::tensor(ys).reshape({n, 1})};
}

} // namespace quickstart
