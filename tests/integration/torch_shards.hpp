#pragma once

// The LibTorch tests' data: each rank's shard of a small regression
// problem, so that training on the ranks' shards can be compared with one
// process training on all of them (torch_test, torch_gpu_test).

#include <utility>

#include <torch/torch.h>

namespace hvactor::test {

/// Rows per shard.
inline constexpr int shard_rows = 8;

/// Rank r's samples: x = (r/2 + i/10, i/5 - r), y = (x0 + 2 x1, x0 - x1).
inline std::pair<torch::Tensor, torch::Tensor> shard_of(int rank) {
  auto x = torch::empty({shard_rows, 2});
  for (int i = 0; i < shard_rows; ++i) {
    x[i][0] = rank * 0.5f + i * 0.1f;
    x[i][1] = i * 0.2f - rank;
  }
  auto y = torch::stack({x.select(1, 0) + 2 * x.select(1, 1), x.select(1, 0) - x.select(1, 1)}, 1);
  return {x, y};
}

} // namespace hvactor::test
