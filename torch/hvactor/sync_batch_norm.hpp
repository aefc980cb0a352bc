#pragma once

/// Horovod's SyncBatchNorm (horovod.torch.SyncBatchNorm) and its
/// differentiable collectives (horovod.torch.mpi_ops' allreduce,
/// grouped_allreduce, allgather, broadcast, alltoall and reducescatter as
/// autograd functions), for LibTorch.

#include <vector>

#include <torch/torch.h>

#include "hvactor/hvd.hpp"

namespace hvactor::hvd {

namespace autograd {

/// allreduce of `t` into a new tensor (Horovod's hvd.allreduce, not the
/// in-place allreduce_): its gradient is the allreduce of the output's
/// gradient with the same op and factors.
torch::Tensor allreduce(const torch::Tensor& t, op o = op::average, scale_factors f = {});

/// allgather (Horovod's hvd.allgather): the gradient of this rank's input
/// is its rows of the average over the ranks of the output's gradient.
torch::Tensor allgather(const torch::Tensor& t);

/// broadcast into a new tensor (Horovod's hvd.broadcast): the root's input
/// gets the average of the output's gradients, every other rank zeros.
torch::Tensor broadcast(const torch::Tensor& t, int root);

/// grouped_allreduce into new tensors (Horovod's hvd.grouped_allreduce):
/// the gradients are the grouped allreduce of the outputs' gradients with
/// the same op and factors.
std::vector<torch::Tensor> grouped_allreduce(const std::vector<torch::Tensor>& ts,
                                             op o = op::average, scale_factors f = {});

/// alltoall (Horovod's hvd.alltoall, the rules of hvd::alltoall): the
/// gradient is the alltoall of the output's gradient with the received
/// splits as send splits, so every row's gradient goes back to the rank
/// that sent the row.
torch::Tensor alltoall(const torch::Tensor& t, const std::vector<int64_t>& splits = {},
                       std::vector<int64_t>* received_splits = nullptr);

/// reducescatter (Horovod's hvd.reducescatter, the rules of
/// hvd::reducescatter, op::sum or op::average): the gradient is the
/// allgather of the output's gradients, times size() for op::sum (as
/// Horovod: the average's gradient is the plain allgather), times the
/// prescale and postscale factors.
torch::Tensor reducescatter(const torch::Tensor& t, op o = op::average, scale_factors f = {});

} // namespace autograd

/// BatchNorm whose training statistics are those of the union of every
/// rank's batch (horovod.torch.SyncBatchNorm, torch.nn.SyncBatchNorm):
/// the forward pass allreduces the per-channel sums, sums of squares and
/// counts (one allreduce, in float64), normalizes with the global mean and
/// variance and updates the running statistics with them; the backward
/// pass allreduces the per-channel sums of dy and dy (x - mean), so the
/// input's gradient is the single-process BatchNorm's over the union. The
/// weight's and bias' gradients stay this rank's own (the distributed
/// optimizer averages them, as for any parameter). Ranks may hold batches
/// of different sizes. CPU and CUDA tensors (Horovod: CUDA only). In eval
/// mode with running statistics, and in a job of one rank, it is a plain
/// BatchNorm. Input (N, C, ...) with at least 2 dimensions.
class SyncBatchNormImpl : public torch::nn::Cloneable<SyncBatchNormImpl> {
public:
  explicit SyncBatchNormImpl(int64_t num_features)
    : SyncBatchNormImpl(torch::nn::BatchNormOptions(num_features)) {
  }
  explicit SyncBatchNormImpl(const torch::nn::BatchNormOptions& options);

  void reset() override;
  torch::Tensor forward(const torch::Tensor& input);

  torch::nn::BatchNormOptions options;
  torch::Tensor weight;
  torch::Tensor bias;
  torch::Tensor running_mean;
  torch::Tensor running_var;
  torch::Tensor num_batches_tracked;
};

TORCH_MODULE(SyncBatchNorm);

} // namespace hvactor::hvd
