#pragma once

// The quickstart's model and data, shared by quickstart.cpp and
// spmd_train.cpp: a 1 -> 15 -> 1 MLP that learns y = x + 1 on
// x = 0..31 (inputs and targets scaled by 1/32 so plain SGD at lr 0.1 is
// stable).

#include <hvactor/torch.hpp>

#include <algorithm>
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

/// The quickstart's training on this rank (after hvd::init()): the model
/// seeded and broadcast from rank 0, SGD at lr 0.1 in hvd's distributed
/// optimizer, this rank's shard, MSE loss.
class trainer {
public:
  trainer() {
    hvactor::hvd::broadcast_parameters(model->parameters(), 0);
    std::tie(inputs_, targets_) = shard(hvactor::hvd::rank(), hvactor::hvd::size());
  }

  /// One epoch in batches of batch_size; returns the last batch's loss.
  float epoch() {
    auto n = inputs_.size(0);
    float last = 0;
    for (int64_t b = 0; b < n; b += batch_size) {
      auto e = std::min<int64_t>(n, b + batch_size);
      optimizer_.zero_grad();
      auto loss = loss_fn_(model->forward(inputs_.slice(0, b, e)), targets_.slice(0, b, e));
      loss.backward();
      optimizer_.step();
      last = loss.item<float>();
    }
    return last;
  }

private:
  // Runs before `model` is built: one thread per worker (several share
  // this machine's cores) and a fixed seed.
  bool seeded_ = (torch::set_num_threads(1), torch::manual_seed(42), true);

public:
  torch::nn::Sequential model = make_model();

private:
  torch::optim::SGD sgd_{model->parameters(), torch::optim::SGDOptions(0.1)};
  hvactor::hvd::distributed_optimizer optimizer_{sgd_};
  torch::nn::MSELoss loss_fn_;
  torch::Tensor inputs_, targets_;
};

} // namespace quickstart
