// SyncBatchNorm and the differentiable collectives: LibTorch autograd
// functions whose forward and backward passes call hvd's tensor
// collectives, with Horovod's gradients (horovod/torch/mpi_ops.py).

#include "hvactor/sync_batch_norm.hpp"

#include <stdexcept>
#include <string>

#include "hvactor/torch.hpp"

namespace hvactor::hvd {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct allreduce_fn : torch::autograd::Function<allreduce_fn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t o, double pre,
                               double post) {
    ctx->saved_data["op"] = o;
    ctx->saved_data["pre"] = pre;
    ctx->saved_data["post"] = post;
    auto y = x.detach().clone();
    hvd::allreduce(y, static_cast<op>(o), {pre, post});
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto g = grads[0].detach().clone();
    hvd::allreduce(g, static_cast<op>(ctx->saved_data["op"].toInt()),
                   {ctx->saved_data["pre"].toDouble(), ctx->saved_data["post"].toDouble()});
    return {g, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

struct allgather_fn : torch::autograd::Function<allgather_fn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x) {
    ctx->saved_data["rows"] = x.dim() == 0 ? int64_t{1} : x.size(0);
    return hvd::allgather(x.detach());
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto g = grads[0].detach().clone();
    hvd::allreduce(g, op::average);
    auto rows = ctx->saved_data["rows"].toInt();
    auto all = hvd::allgather(torch::full({1}, rows, torch::kLong));
    int64_t offset = all.narrow(0, 0, hvd::rank()).sum().item<int64_t>();
    return {g.narrow(0, offset, rows)};
  }
};

struct broadcast_fn : torch::autograd::Function<broadcast_fn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t root) {
    ctx->saved_data["root"] = root;
    auto y = x.detach().clone();
    hvd::broadcast(y, static_cast<int>(root));
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto g = grads[0].detach().clone();
    hvd::allreduce(g, op::average);
    if (hvd::rank() != ctx->saved_data["root"].toInt())
      g.zero_();
    return {g, torch::Tensor()};
  }
};

// The ops, factors and tensors of a grouped allreduce travel as separate
// arguments: LibTorch tracks each tensor of an at::TensorList.
struct grouped_allreduce_fn : torch::autograd::Function<grouped_allreduce_fn> {
  static variable_list forward(AutogradContext* ctx, at::TensorList xs, int64_t o, double pre,
                               double post) {
    ctx->saved_data["op"] = o;
    ctx->saved_data["pre"] = pre;
    ctx->saved_data["post"] = post;
    std::vector<torch::Tensor> ys;
    for (const auto& x : xs)
      ys.push_back(x.detach().clone());
    hvd::grouped_allreduce(ys, static_cast<op>(o), {pre, post});
    return ys;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    std::vector<torch::Tensor> gs;
    for (auto& g : grads)
      gs.push_back(g.detach().clone());
    hvd::grouped_allreduce(gs, static_cast<op>(ctx->saved_data["op"].toInt()),
                           {ctx->saved_data["pre"].toDouble(), ctx->saved_data["post"].toDouble()});
    gs.resize(gs.size() + 3); // op, pre, post
    return gs;
  }
};

struct alltoall_fn : torch::autograd::Function<alltoall_fn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x,
                               const std::vector<int64_t>& splits, std::vector<int64_t>* received) {
    std::vector<int64_t> back;
    auto y = hvd::alltoall(x.detach(), splits, &back);
    if (received)
      *received = back;
    ctx->saved_data["received"] = back;
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    // The rows that came from rank i go back to rank i.
    auto back = ctx->saved_data["received"].toIntVector();
    return {hvd::alltoall(grads[0].detach(), back), torch::Tensor(), torch::Tensor()};
  }
};

struct reducescatter_fn : torch::autograd::Function<reducescatter_fn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t o, double pre,
                               double post) {
    ctx->saved_data["op"] = o;
    ctx->saved_data["pre"] = pre;
    ctx->saved_data["post"] = post;
    return hvd::reducescatter(x.detach(), static_cast<op>(o), {pre, post});
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    // Horovod's HorovodReducescatter.backward: the sum's gradient is
    // size() times the gathered one, the average's the gathered one, both
    // scaled by the two factors.
    auto g = grads[0].detach().clone();
    if (static_cast<op>(ctx->saved_data["op"].toInt()) == op::sum)
      g.mul_(hvd::size());
    double pre = ctx->saved_data["pre"].toDouble(), post = ctx->saved_data["post"].toDouble();
    if (pre != 1.0)
      g.mul_(pre);
    if (post != 1.0)
      g.mul_(post);
    return {hvd::allgather(g), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

// The shape that lines a per-channel vector up with (N, C, ...).
std::vector<int64_t> channel_shape(const torch::Tensor& x) {
  std::vector<int64_t> shape(static_cast<size_t>(x.dim()), 1);
  shape[1] = x.size(1);
  return shape;
}

// Every dimension but the channels'.
std::vector<int64_t> reduced_dims(const torch::Tensor& x) {
  std::vector<int64_t> dims{0};
  for (int64_t d = 2; d < x.dim(); ++d)
    dims.push_back(d);
  return dims;
}

struct sync_bn_fn : torch::autograd::Function<sync_bn_fn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& input,
                               const torch::Tensor& weight, const torch::Tensor& bias,
                               torch::Tensor running_mean, torch::Tensor running_var, double eps,
                               double momentum) {
    auto x = input.contiguous();
    int64_t c = x.size(1);
    auto dims = reduced_dims(x);
    auto xd = x.to(torch::kDouble);
    // One allreduce: sums, sums of squares, count.
    auto count = torch::full({1}, static_cast<double>(x.numel() / std::max<int64_t>(c, 1)),
                             xd.options());
    auto stats = torch::cat({xd.sum(dims), (xd * xd).sum(dims), count});
    hvd::allreduce(stats, op::sum);
    double total = stats[2 * c].item<double>();
    if (total < 1)
      throw std::invalid_argument("hvd::SyncBatchNorm: no rank has a sample");
    auto mean = stats.narrow(0, 0, c) / total;
    auto var = (stats.narrow(0, c, c) / total - mean * mean).clamp_min(0);
    auto invstd = (var + eps).rsqrt();
    if (running_mean.defined()) {
      torch::NoGradGuard no_grad;
      running_mean.mul_(1 - momentum).add_(mean.to(running_mean.dtype()), momentum);
      auto unbiased = total > 1 ? var * (total / (total - 1)) : var;
      running_var.mul_(1 - momentum).add_(unbiased.to(running_var.dtype()), momentum);
    }
    auto shape = channel_shape(x);
    auto m = mean.to(x.dtype()), s = invstd.to(x.dtype());
    auto w = weight.defined() ? weight : torch::ones({c}, x.options());
    auto y = (x - m.view(shape)) * (s * w).view(shape);
    if (bias.defined())
      y = y + bias.view(shape);
    ctx->save_for_backward({x, w, m, s});
    ctx->saved_data["total"] = total;
    ctx->saved_data["affine"] = weight.defined();
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    auto x = saved[0], w = saved[1], mean = saved[2], invstd = saved[3];
    auto dy = grads[0].contiguous();
    auto shape = channel_shape(x);
    auto dims = reduced_dims(x);
    auto xmu = x - mean.view(shape);
    auto sum_dy = dy.sum(dims);
    auto sum_dy_xmu = (dy * xmu).sum(dims);
    torch::Tensor grad_input, grad_weight, grad_bias;
    if (ctx->saved_data["affine"].toBool()) {
      grad_weight = sum_dy_xmu * invstd; // this rank's own, as any parameter's
      grad_bias = sum_dy;
    }
    // The global means of dy and dy (x - mean), for the input's gradient.
    int64_t c = x.size(1);
    auto both = torch::cat({sum_dy, sum_dy_xmu}).to(torch::kDouble);
    hvd::allreduce(both, op::sum);
    double total = ctx->saved_data["total"].toDouble();
    auto mean_dy = (both.narrow(0, 0, c) / total).to(x.dtype());
    auto mean_dy_xmu = (both.narrow(0, c, c) / total).to(x.dtype());
    grad_input = (dy - mean_dy.view(shape) - xmu * (invstd * invstd * mean_dy_xmu).view(shape)) *
                 (invstd * w).view(shape);
    return {grad_input, grad_weight, grad_bias, torch::Tensor(), torch::Tensor(),
            torch::Tensor(), torch::Tensor()};
  }
};

} // namespace

namespace autograd {

torch::Tensor allreduce(const torch::Tensor& t, op o, scale_factors f) {
  return allreduce_fn::apply(t, static_cast<int64_t>(o), f.prescale_factor, f.postscale_factor);
}

torch::Tensor allgather(const torch::Tensor& t) {
  return allgather_fn::apply(t);
}

torch::Tensor broadcast(const torch::Tensor& t, int root) {
  return broadcast_fn::apply(t, static_cast<int64_t>(root));
}

std::vector<torch::Tensor> grouped_allreduce(const std::vector<torch::Tensor>& ts, op o,
                                             scale_factors f) {
  return grouped_allreduce_fn::apply(at::TensorList(ts), static_cast<int64_t>(o),
                                     f.prescale_factor, f.postscale_factor);
}

torch::Tensor alltoall(const torch::Tensor& t, const std::vector<int64_t>& splits,
                       std::vector<int64_t>* received_splits) {
  return alltoall_fn::apply(t, splits, received_splits);
}

torch::Tensor reducescatter(const torch::Tensor& t, op o, scale_factors f) {
  return reducescatter_fn::apply(t, static_cast<int64_t>(o), f.prescale_factor,
                                 f.postscale_factor);
}

} // namespace autograd

SyncBatchNormImpl::SyncBatchNormImpl(const torch::nn::BatchNormOptions& opts) : options(opts) {
  reset();
}

void SyncBatchNormImpl::reset() {
  auto n = options.num_features();
  if (options.affine()) {
    weight = register_parameter("weight", torch::ones({n}));
    bias = register_parameter("bias", torch::zeros({n}));
  }
  if (options.track_running_stats()) {
    running_mean = register_buffer("running_mean", torch::zeros({n}));
    running_var = register_buffer("running_var", torch::ones({n}));
    num_batches_tracked = register_buffer("num_batches_tracked", torch::zeros({}, torch::kLong));
  }
}

torch::Tensor SyncBatchNormImpl::forward(const torch::Tensor& input) {
  if (input.dim() < 2)
    throw std::invalid_argument("hvd::SyncBatchNorm: expected at least 2D input (got " +
                                std::to_string(input.dim()) + "D input)");
  if (input.size(1) != options.num_features())
    throw std::invalid_argument("hvd::SyncBatchNorm: expected " +
                                std::to_string(options.num_features()) + " channels, got " +
                                std::to_string(input.size(1)));
  bool track = options.track_running_stats();
  double factor = options.momentum().value_or(0.0);
  if (is_training() && track) {
    num_batches_tracked += 1;
    if (!options.momentum()) // a cumulative moving average
      factor = 1.0 / num_batches_tracked.item<double>();
  }
  if ((!is_training() && track) || !is_initialized() || hvd::size() == 1)
    return torch::batch_norm(input, weight, bias, running_mean, running_var,
                             is_training() || !track, factor, options.eps(), false);
  return sync_bn_fn::apply(input, weight, bias, track ? running_mean : torch::Tensor(),
                           track ? running_var : torch::Tensor(), options.eps(), factor);
}

} // namespace hvactor::hvd
