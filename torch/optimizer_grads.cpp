// distributed_optimizer's reductions of one gradient: the dense allreduce
// on the tensor's path, and Horovod's two ways with a sparse gradient.

#include "torch/optimizer_grads.hpp"

#include "torch/tensor_check.hpp"
#include "torch/tensor_path.hpp"

namespace hvactor::hvd::detail {

namespace {

// `dense` as a sparse tensor with `sparse_dims` sparse dimensions (an
// Embedding gradient's layout: rows with their vectors): the index tuples
// where any element is nonzero. One pass over the table; LibTorch's
// to_sparse(sparse_dims) takes seconds on a 24 MiB table (1.13).
torch::Tensor to_sparse_rows(const torch::Tensor& dense, int64_t sparse_dims) {
  if (sparse_dims >= dense.dim())
    return dense.to_sparse();
  auto lead = dense.flatten(0, sparse_dims - 1);
  auto at = lead.ne(0).flatten(1).any(1).nonzero().squeeze(1);
  auto values = lead.index_select(0, at);
  std::vector<torch::Tensor> coords(static_cast<size_t>(sparse_dims));
  auto rest = at;
  for (int64_t d = sparse_dims - 1; d >= 0; --d) {
    coords[static_cast<size_t>(d)] = rest.remainder(dense.size(d));
    rest = rest.div(dense.size(d), "floor");
  }
  auto out = torch::sparse_coo_tensor(torch::stack(coords), values, dense.sizes(),
                                      dense.options().layout(torch::kSparse));
  return out._coalesced_(true); // sorted and distinct by construction
}

// Every call below runs on the optimizer's set: from the caller's thread or
// autograd's, which no process_set_scope of the caller reaches.
struct on_set {
  explicit on_set(const wire_plan& plan) {
    if (plan.set)
      scope.emplace(*plan.set);
  }
  std::optional<process_set_scope> scope;
};

// Starts the in-place allreduce of `buf` (contiguous) on its path.
void start_dense(grad_in_flight& out, torch::Tensor& buf, const wire_plan& plan,
                 const std::string& name) {
  auto type = dtype_of_tensor(buf, "distributed_optimizer");
  auto count = static_cast<size_t>(buf.numel());
  switch (path_of(buf, "distributed_optimizer")) {
    case tensor_path::host:
      out.h = allreduce_async(buf.data_ptr(), count, type, plan.reduction, name);
      break;
    case tensor_path::device:
      // Ordered on the GPU after backward's kernels on the current stream;
      // the hook returns at once (the overlap with the rest of backward).
      out.h = device_allreduce_async(buf.data_ptr(), count, type, plan.reduction, name,
                                     stream_of(buf));
      break;
    case tensor_path::via_cpu:
      out.staged = buf.to(torch::kCPU);
      out.h = allreduce_async(out.staged.data_ptr(), count, type, plan.reduction, name);
      break;
  }
}

// `target` (contiguous), or its float16 copy under compression::fp16.
grad_in_flight start_on_wire(torch::Tensor target, const wire_plan& plan,
                             const std::string& name) {
  grad_in_flight out;
  out.target = target;
  auto* buf = &out.target;
  if (plan.wire == compression::fp16 &&
      (target.scalar_type() == torch::kFloat || target.scalar_type() == torch::kDouble)) {
    out.wire = target.to(torch::kHalf);
    buf = &out.wire;
  }
  start_dense(out, *buf, plan, name);
  return out;
}

} // namespace

grad_in_flight start_grad(torch::Tensor& p, const wire_plan& plan, const std::string& name) {
  torch::NoGradGuard no_grad;
  on_set set{plan};
  auto g = p.grad();
  if (!g.defined()) {
    g = torch::zeros(p.sizes(), p.options());
    p.mutable_grad() = g;
  }
  if (g.is_sparse()) {
    if (!plan.sparse_as_dense) {
      grad_in_flight out;
      out.param = p;
      out.sparse = sparse_allreduce_async(g, plan.reduction, name);
      return out;
    }
    auto sparse_dims = g.sparse_dim();
    g = g.to_dense();
    if (plan.predivide != 1.0)
      g.mul_(1.0 / plan.predivide);
    auto out = start_on_wire(g, plan, name);
    out.param = p;
    out.to_sparse = sparse_dims;
    return out;
  }
  if (!g.is_contiguous()) {
    g = g.contiguous();
    p.mutable_grad() = g;
  }
  if (plan.predivide != 1.0)
    g.mul_(1.0 / plan.predivide);
  return start_on_wire(g, plan, name);
}

grad_in_flight start_tensor(const torch::Tensor& t, const wire_plan& plan,
                            const std::string& name) {
  torch::NoGradGuard no_grad;
  on_set set{plan};
  return start_on_wire(t, plan, name);
}

namespace {

// Steps `inner` on `p` alone: every param group is emptied but `p`'s for
// the call (the optimizer's per-parameter state is keyed by the tensor, so
// it is `p`'s own that moves), then restored, also when step() throws.
void step_only(torch::optim::Optimizer& inner, const torch::Tensor& p) {
  auto& groups = inner.param_groups();
  std::vector<std::vector<torch::Tensor>> stashed;
  stashed.reserve(groups.size());
  for (auto& g : groups) {
    stashed.push_back(std::move(g.params()));
    g.params().clear();
    for (auto& q : stashed.back())
      if (q.is_same(p))
        g.params().push_back(q);
  }
  struct restore {
    std::vector<torch::optim::OptimizerParamGroup>& groups;
    std::vector<std::vector<torch::Tensor>>& stashed;
    ~restore() {
      for (size_t i = 0; i < groups.size(); ++i)
        groups[i].params() = std::move(stashed[i]);
    }
  } guard{groups, stashed};
  inner.step();
}

} // namespace

grad_in_flight start_delta(torch::optim::Optimizer& inner, torch::Tensor& p, torch::Tensor& start,
                           const wire_plan& plan, const std::string& name) {
  {
    torch::NoGradGuard no_grad;
    if (!p.grad().defined())
      p.mutable_grad() = torch::zeros_like(p);
    if (!start.defined())
      start = torch::empty_like(p);
    start.copy_(p);
  }
  step_only(inner, p); // the optimizer's own no-grad guard
  torch::NoGradGuard no_grad;
  p.sub_(start);
  try {
    return start_tensor(p, plan, name);
  } catch (...) {
    p.copy_(start); // not started: the parameter as it was
    throw;
  }
}

void finish_grad(grad_in_flight& f, const wire_plan& plan) {
  torch::NoGradGuard no_grad;
  if (f.sparse) {
    auto reduced = synchronize(*f.sparse);
    f.param.mutable_grad() = reduced;
    return;
  }
  synchronize(f.h);
  if (f.staged.defined())
    (f.wire.defined() ? f.wire : f.target).copy_(f.staged);
  if (f.wire.defined())
    f.target.copy_(f.wire);
  if (plan.predivide != 1.0)
    f.target.mul_(plan.predivide);
  // Back in the gradient's own layout: an Embedding's rows with their
  // vectors (to_sparse() would index every element: 2-9x slower).
  if (f.to_sparse > 0)
    f.param.mutable_grad() = to_sparse_rows(f.target, f.to_sparse);
}

void finish_all(std::vector<grad_in_flight>& fs, const wire_plan& plan) {
  std::exception_ptr first;
  for (auto& f : fs) {
    try {
      finish_grad(f, plan);
    } catch (...) {
      if (!first)
        first = std::current_exception();
    }
  }
  fs.clear();
  if (first)
    std::rethrow_exception(first);
}

} // namespace hvactor::hvd::detail
