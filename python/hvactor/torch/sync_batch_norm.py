"""horovod.torch.SyncBatchNorm for hvactor: batch statistics over every
rank's batch (CPU and CUDA tensors)."""

import torch
from torch.nn.modules.batchnorm import _BatchNorm

from hvactor.torch.mpi_ops import Sum, allreduce, global_process_set, size


class _SyncBatchNormFunction(torch.autograd.Function):
    """Normalizes with the mean and variance of the union of the ranks'
    batches; the backward pass reduces the per-channel sums it needs."""

    @staticmethod
    def forward(ctx, x, weight, bias, running_mean, running_var, eps, momentum, process_set):
        dims = [0] + list(range(2, x.dim()))
        count = torch.tensor([x.numel() / x.shape[1]], dtype=torch.float64, device=x.device)
        xd = x.double()
        stats = torch.cat([xd.sum(dims), (xd * xd).sum(dims), count])
        stats = allreduce(stats, op=Sum, name=None, process_set=process_set)
        c = x.shape[1]
        n = stats[-1]
        mean = stats[:c] / n
        var = (stats[c:2 * c] / n - mean * mean).clamp_min(0)
        if running_mean is not None:
            running_mean.mul_(1 - momentum).add_(mean.to(running_mean.dtype), alpha=momentum)
            unbiased = var * n / (n - 1) if n > 1 else var
            running_var.mul_(1 - momentum).add_(unbiased.to(running_var.dtype), alpha=momentum)
        shape = [1, c] + [1] * (x.dim() - 2)
        invstd = torch.rsqrt(var + eps)
        xhat = ((xd - mean.view(shape)) * invstd.view(shape)).to(x.dtype)
        ctx.save_for_backward(xhat, weight, invstd.to(x.dtype))
        ctx.count = n
        ctx.process_set = process_set
        y = xhat
        if weight is not None:
            y = y * weight.view(shape) + bias.view(shape)
        return y

    @staticmethod
    def backward(ctx, dy):
        xhat, weight, invstd = ctx.saved_tensors
        c = xhat.shape[1]
        dims = [0] + list(range(2, xhat.dim()))
        shape = [1, c] + [1] * (xhat.dim() - 2)
        grad_weight = (dy * xhat).sum(dims) if weight is not None else None
        grad_bias = dy.sum(dims) if weight is not None else None
        dxhat = dy * weight.view(shape) if weight is not None else dy
        sums = allreduce(torch.cat([dxhat.sum(dims), (dxhat * xhat).sum(dims)]).double(),
                         op=Sum, process_set=ctx.process_set).to(dy.dtype)
        n = ctx.count.to(dy.dtype)
        dx = (dxhat - sums[:c].view(shape) / n - xhat * sums[c:].view(shape) / n) * \
            invstd.view(shape)
        return dx, grad_weight, grad_bias, None, None, None, None, None


class SyncBatchNorm(_BatchNorm):
    """BatchNorm whose training statistics are those of every rank's batch
    together (horovod.torch.SyncBatchNorm). The weight's and bias'
    gradients stay this rank's own (DistributedOptimizer averages them)."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, process_set=global_process_set):
        super().__init__(num_features, eps, momentum, affine, track_running_stats)
        self.process_set = process_set

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError(f"expected at least 2D input (got {input.dim()}D input)")

    def forward(self, input):
        self._check_input_dim(input)
        if not self.training or size() == 1:
            return super().forward(input)
        momentum = self.momentum if self.momentum is not None else 0.0
        if self.training and self.track_running_stats:
            self.num_batches_tracked += 1
            if self.momentum is None:
                momentum = 1.0 / float(self.num_batches_tracked)
        return _SyncBatchNormFunction.apply(
            input, self.weight, self.bias, self.running_mean if self.track_running_stats else None,
            self.running_var if self.track_running_stats else None, self.eps, momentum,
            self.process_set)
