#pragma once

// The distributed optimizer tests' single-process references (the
// torch_optimizer_test and, on CUDA tensors, torch_gpu_test): a model with
// sparse gradients, and Adasum's pairwise tree played in one process.

#include <memory>
#include <vector>

#include <torch/torch.h>

#include "torch_shards.hpp"

namespace hvactor::test {

inline constexpr int embed_steps = 5;
inline constexpr int adasum_steps = 6;

inline std::vector<float> flat(const std::vector<torch::Tensor>& ts) {
  std::vector<float> out;
  for (auto& t : ts) {
    auto c = t.detach().to(torch::kCPU).to(torch::kFloat).contiguous();
    out.insert(out.end(), c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
  }
  return out;
}

// Embedding(10, 3, sparse gradients) -> Linear(3, 1): rank r's batch of 6
// indices (duplicates inside a batch, overlaps across ranks).
struct embed_model {
  torch::nn::Embedding emb{torch::nn::EmbeddingOptions(10, 3).sparse(true)};
  torch::nn::Linear lin{3, 1};
  embed_model() {
    torch::manual_seed(7);
    emb = torch::nn::Embedding(torch::nn::EmbeddingOptions(10, 3).sparse(true));
    lin = torch::nn::Linear(3, 1);
  }
  std::vector<torch::Tensor> params() {
    return {emb->weight, lin->weight, lin->bias};
  }
  torch::Tensor loss(const std::vector<int>& ranks, torch::Device device = torch::kCPU) {
    std::vector<torch::Tensor> idx, y;
    for (int r : ranks) {
      idx.push_back(torch::tensor({int64_t{r}, int64_t{r + 1}, int64_t{r + 2}, int64_t{2 * r % 10},
                                   int64_t{7}, int64_t{r + 1}}));
      y.push_back(torch::arange(6, torch::kFloat) * 0.1f + static_cast<float>(r));
    }
    auto out = lin(emb(torch::cat(idx).to(device))).squeeze(1);
    return torch::mse_loss(out, torch::cat(y).to(device));
  }
};

inline std::vector<float> embedding_single(int n) {
  embed_model m;
  torch::optim::SGD sgd(m.params(), 0.1);
  std::vector<int> all;
  for (int r = 0; r < n; ++r)
    all.push_back(r);
  for (int s = 0; s < embed_steps; ++s) {
    sgd.zero_grad();
    m.loss(all).backward(); // the mean over equal batches: the ranks' average
    sgd.step();
  }
  return flat(m.params());
}

// Horovod's pairwise Adasum of a and b, in double.
inline torch::Tensor adasum_pair(const torch::Tensor& a, const torch::Tensor& b) {
  auto da = a.to(torch::kDouble), db = b.to(torch::kDouble);
  double dot = (da * db).sum().item<double>();
  double aa = (da * da).sum().item<double>(), bb = (db * db).sum().item<double>();
  double ca = aa < 1e-30 ? 1.0 : 1.0 - dot / (2 * aa);
  double cb = bb < 1e-30 ? 1.0 : 1.0 - dot / (2 * bb);
  return (ca * da + cb * db).to(a.scalar_type());
}

// Pairs (0,1), (2,3), ..., then pairs of pairs.
inline torch::Tensor adasum_tree(std::vector<torch::Tensor> ds) {
  while (ds.size() > 1) {
    std::vector<torch::Tensor> next;
    for (size_t i = 0; i < ds.size(); i += 2)
      next.push_back(adasum_pair(ds[i], ds[i + 1]));
    ds = std::move(next);
  }
  return ds[0];
}

// One process playing n ranks: each its own SGD with momentum (its own
// buffers) from the shared weights; the deltas combine with Adasum.
inline std::vector<float> adasum_single(int n) {
  std::vector<torch::nn::Linear> models;
  std::vector<std::unique_ptr<torch::optim::SGD>> opts;
  for (int r = 0; r < n; ++r) {
    torch::manual_seed(1);
    models.emplace_back(2, 2);
    opts.push_back(std::make_unique<torch::optim::SGD>(
      models.back()->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9)));
  }
  auto shared = flat(models[0]->parameters());
  for (int s = 0; s < adasum_steps; ++s) {
    std::vector<std::vector<torch::Tensor>> deltas(2);
    std::vector<torch::Tensor> starts;
    for (auto& p : models[0]->parameters())
      starts.push_back(p.detach().clone());
    for (int r = 0; r < n; ++r) {
      auto [x, y] = shard_of(r);
      opts[r]->zero_grad();
      torch::mse_loss(models[r](x), y).backward();
      opts[r]->step();
      auto ps = models[r]->parameters();
      for (size_t i = 0; i < ps.size(); ++i)
        deltas[i].push_back(ps[i].detach() - starts[i]);
    }
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < starts.size(); ++i) {
      auto next = starts[i] + adasum_tree(deltas[i]);
      for (auto& m : models)
        m->parameters()[i].copy_(next);
    }
  }
  return flat(models[0]->parameters());
}

} // namespace hvactor::test
