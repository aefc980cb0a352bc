#include "hvactor/torch.hpp"

#include "hvactor/errors.hpp"
#include "optimizer_state.hpp"
#include "tensor_check.hpp"

#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>

namespace hvactor::hvd {

namespace {

dtype dtype_of_tensor(const torch::Tensor& t, const char* call) {
  if (t.is_cuda())
    throw std::invalid_argument(fmt::format("hvd::{}: CUDA tensors need a CUDA build of LibTorch "
                                            "(Debian's libtorch is CPU-only); pass a CPU tensor",
                                            call));
  switch (t.scalar_type()) {
    case torch::kFloat:
      return dtype::float32;
    case torch::kDouble:
      return dtype::float64;
    case torch::kInt:
      return dtype::int32;
    case torch::kLong:
      return dtype::int64;
    case torch::kHalf:
      return dtype::float16;
    default:
      throw std::invalid_argument(fmt::format("hvd::{}: tensors of {} are not supported (float, "
                                              "double, int32, int64, half)",
                                              call, c10::toString(t.scalar_type())));
  }
}

// Runs `fn` on a contiguous view of `t` and copies back when it had to copy.
template <class F>
void on_contiguous(torch::Tensor& t, F&& fn) {
  if (t.is_contiguous()) {
    fn(t);
    return;
  }
  auto tmp = t.contiguous();
  fn(tmp);
  t.copy_(tmp);
}

} // namespace

void allreduce(torch::Tensor& t, op o) {
  auto type = dtype_of_tensor(t, "allreduce");
  torch::NoGradGuard no_grad;
  on_contiguous(t, [&](torch::Tensor& c) {
    detail::allreduce(c.data_ptr(), static_cast<size_t>(c.numel()), type, o, {});
  });
}

torch::Tensor allgather(const torch::Tensor& t, const std::string& name) {
  auto call = detail::call_name("allgather", name);
  auto c = t.contiguous();
  // Every rank's dtype and shape first: the result is sized from them, and
  // a peer's row of another shape must fail here, not overflow `out`.
  auto table = detail::exchange({&c, 1}, call);
  detail::check_allgather(table, call);
  auto type = dtype_of_tensor(c, "allgather");
  std::vector<int64_t> shape = c.sizes().vec();
  int64_t rows = 0;
  for (auto& rank_descs : table) {
    auto& d = rank_descs.front();
    if (__builtin_add_overflow(rows, d.sizes.empty() ? 1 : d.sizes[0], &rows))
      throw collective_error(fmt::format("{}: the ranks' rows add up to more than 2^63", call));
  }
  if (shape.empty())
    shape = {rows};
  else
    shape[0] = rows;
  int64_t bytes_out = static_cast<int64_t>(size_of(type));
  for (auto s : shape)
    if (__builtin_mul_overflow(bytes_out, s, &bytes_out))
      throw collective_error(
        fmt::format("{}: the gathered shape [{}] holds more than 2^63 bytes", call,
                    fmt::join(shape, ", ")));
  auto out = torch::empty(shape, c.options());
  auto bytes = detail::allgather(c.data_ptr(), static_cast<size_t>(c.numel()), type);
  if (bytes.size() != static_cast<size_t>(bytes_out))
    throw collective_error(fmt::format("{}: received {} bytes, but the ranks' shapes make {}",
                                       call, bytes.size(), bytes_out));
  if (!bytes.empty())
    std::memcpy(out.data_ptr(), bytes.data(), bytes.size());
  return out;
}

namespace {

void check_root(int root, const char* call) {
  if (root < 0 || root >= size())
    throw std::invalid_argument(
      fmt::format("hvd::{}: root {} is not a rank (size {})", call, root, size()));
}

// Broadcasts tensors whose descriptions every rank has checked.
void broadcast_checked(torch::Tensor& t, int root) {
  auto type = dtype_of_tensor(t, "broadcast");
  on_contiguous(t, [&](torch::Tensor& c) {
    detail::broadcast(c.data_ptr(), static_cast<size_t>(c.numel()), type, root);
  });
}

} // namespace

void broadcast(torch::Tensor& t, int root, const std::string& name) {
  check_root(root, "broadcast");
  auto call = detail::call_name("broadcast", name);
  detail::check_broadcast(detail::exchange({&t, 1}, call), root, call);
  torch::NoGradGuard no_grad;
  broadcast_checked(t, root);
}

void broadcast_parameters(const std::vector<torch::Tensor>& params, int root) {
  check_root(root, "broadcast_parameters");
  // One exchange checks every parameter's dtype and shape against root's.
  detail::check_broadcast(detail::exchange(params, "hvd::broadcast_parameters"), root,
                          "hvd::broadcast_parameters");
  torch::NoGradGuard no_grad;
  for (auto p : params) // a Tensor is a handle: the parameter itself changes
    broadcast_checked(p, root);
}

void broadcast_optimizer_state(torch::optim::Optimizer& opt, int root) {
  check_root(root, "broadcast_optimizer_state");
  detail::broadcast_optimizer(opt, root);
}

namespace {

// One gradient's allreduce in flight: the handle and, with fp16
// compression, the float16 copy that travels (kept alive until finished).
struct grad_in_flight {
  handle h;
  torch::Tensor grad;
  torch::Tensor wire;
};

// Starts the allreduce of `p`'s gradient (made contiguous in place).
grad_in_flight start_grad(torch::Tensor& p, op reduction, compression c, const std::string& name) {
  torch::NoGradGuard no_grad;
  auto g = p.grad();
  if (!g.is_contiguous()) {
    g = g.contiguous();
    p.mutable_grad() = g;
  }
  grad_in_flight out{{}, g, {}};
  auto* buf = &g;
  if (c == compression::fp16 &&
      (g.scalar_type() == torch::kFloat || g.scalar_type() == torch::kDouble)) {
    out.wire = g.to(torch::kHalf);
    buf = &out.wire;
  }
  auto type = dtype_of_tensor(*buf, "distributed_optimizer");
  out.h = detail::allreduce_async(buf->data_ptr(), static_cast<size_t>(buf->numel()), type,
                                  reduction, name);
  return out;
}

// Waits for it and writes a compressed result back into the gradient.
void finish_grad(grad_in_flight& f) {
  synchronize(f.h);
  if (f.wire.defined()) {
    torch::NoGradGuard no_grad;
    f.grad.copy_(f.wire);
  }
}

} // namespace

// The overlap hooks' shared state: which parameters' allreduces backward
// started in this reducing pass. Hooks run on autograd's thread (the caller's
// for CPU tensors) while step() runs on the caller's: locked.
struct distributed_optimizer::overlap_state {
  struct param {
    torch::Tensor tensor;
    std::string name;
    std::shared_ptr<torch::autograd::Node> accumulator; // kept alive: it holds the hook
    uintptr_t hook = 0;
  };
  std::mutex mu;
  std::vector<param> params;
  std::map<size_t, grad_in_flight> started; // by index into params
  op reduction = op::average;
  compression wire = compression::none;
  /// Set by the optimizer: the next backward's gradients are the ones step()
  /// reduces (every k-th pass).
  bool reducing = true;

  void start(size_t i) {
    std::lock_guard<std::mutex> guard{mu};
    if (!reducing)
      return;
    auto& p = params[i];
    if (started.count(i))
      throw error(fmt::format(
        "hvd::distributed_optimizer: the gradient of {} was computed more than "
        "backward_passes_per_step times before step(); raise backward_passes_per_step to "
        "accumulate it locally",
        p.name));
    started.emplace(i, launch(p));
  }

  grad_in_flight launch(param& p) {
    return start_grad(p.tensor, reduction, wire, p.name);
  }
};

namespace {

struct grad_ready_hook : torch::autograd::FunctionPostHook {
  grad_ready_hook(std::weak_ptr<distributed_optimizer::overlap_state> st, size_t index)
    : st_(std::move(st)), index_(index) {
  }
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    if (auto st = st_.lock())
      st->start(index_);
    return outputs;
  }

private:
  std::weak_ptr<distributed_optimizer::overlap_state> st_;
  size_t index_;
};

} // namespace

distributed_optimizer::distributed_optimizer(torch::optim::Optimizer& inner,
                                             int backward_passes_per_step, op reduction,
                                             bool overlap, compression wire)
  : inner_(inner), passes_(backward_passes_per_step), reduction_(reduction), wire_(wire) {
  if (passes_ < 1)
    throw std::invalid_argument(fmt::format(
      "hvd::distributed_optimizer: backward_passes_per_step must be >= 1: Got {}.", passes_));
  if (reduction_ != op::average && reduction_ != op::sum)
    throw std::invalid_argument(
      "hvd::distributed_optimizer: gradients are combined with op::average or op::sum");
  if (!overlap)
    return;
  overlap_ = std::make_shared<overlap_state>();
  overlap_->reduction = reduction_;
  overlap_->wire = wire_;
  overlap_->reducing = passes_ == 1;
  int index = 0;
  for (auto& group : inner_.param_groups())
    for (auto& p : group.params()) {
      ++index;
      if (!p.requires_grad() || !p.is_leaf())
        continue;
      overlap_state::param entry{p, fmt::format("grad.{}", index), nullptr, 0};
      entry.accumulator = torch::autograd::impl::grad_accumulator(p);
      if (!entry.accumulator)
        continue;
      auto i = overlap_->params.size();
      entry.hook = entry.accumulator->add_post_hook(
        std::make_unique<grad_ready_hook>(std::weak_ptr<overlap_state>(overlap_), i));
      overlap_->params.push_back(std::move(entry));
    }
}

distributed_optimizer::~distributed_optimizer() {
  if (!overlap_)
    return;
  // The parameters outlive this optimizer: take the hooks off, and let any
  // allreduce still in flight finish before its gradient may go away.
  for (auto& p : overlap_->params)
    p.accumulator->del_post_hook(p.hook);
  for (auto& [i, f] : overlap_->started) {
    try {
      synchronize(f.h);
    } catch (const std::exception&) {
      // A destructor must not throw; the error was the caller's to see.
    }
  }
}

void distributed_optimizer::zero_grad() {
  if (calls_ % passes_ == 0)
    inner_.zero_grad();
}

bool distributed_optimizer::step() {
  ++calls_;
  bool reduce = calls_ % passes_ == 0;
  if (overlap_) {
    std::map<size_t, grad_in_flight> started;
    {
      std::lock_guard<std::mutex> guard{overlap_->mu};
      started.swap(overlap_->started);
      // The next backward reduces when the step after it does.
      overlap_->reducing = (calls_ + 1) % passes_ == 0;
    }
    if (!reduce)
      return false;
    // Gradients backward did not produce (parameters unused by this graph,
    // set by hand): reduced here, like the rest, in parameter order.
    std::vector<grad_in_flight> pending;
    for (size_t i = 0; i < overlap_->params.size(); ++i) {
      auto it = started.find(i);
      if (it != started.end())
        pending.push_back(std::move(it->second));
      else if (overlap_->params[i].tensor.grad().defined())
        pending.push_back(overlap_->launch(overlap_->params[i]));
    }
    for (auto& f : pending)
      finish_grad(f);
    inner_.step();
    return true;
  }
  if (!reduce)
    return false;
  // One async allreduce per gradient: the engine fuses them into as few
  // Gloo operations as the fusion threshold allows.
  std::vector<grad_in_flight> pending;
  int index = 0;
  for (auto& group : inner_.param_groups())
    for (auto& p : group.params()) {
      ++index;
      if (p.grad().defined())
        pending.push_back(start_grad(p, reduction_, wire_, fmt::format("grad.{}", index)));
    }
  for (auto& f : pending)
    finish_grad(f);
  inner_.step();
  return true;
}

} // namespace hvactor::hvd

namespace hvactor::train {

column column_from(const at::Tensor& t, column_tag) {
  if (!t.defined())
    throw std::invalid_argument("train::column: an undefined tensor");
  if (t.dim() == 0)
    throw std::invalid_argument("train::column: a 0-dimensional tensor has no rows");
  auto x = t.detach().to(torch::kCPU);
  dtype type;
  if (x.scalar_type() == torch::kFloat || x.scalar_type() == torch::kDouble) {
    type = x.scalar_type() == torch::kFloat ? dtype::float32 : dtype::float64;
  } else if (x.is_floating_point()) {
    x = x.to(torch::kFloat);
    type = dtype::float32;
  } else if (x.is_complex()) {
    throw std::invalid_argument("train::column: complex tensors are not supported");
  } else {
    x = x.to(torch::kLong);
    type = dtype::int64;
  }
  x = x.contiguous();
  std::vector<int64_t> inner(x.sizes().begin() + 1, x.sizes().end());
  auto n = static_cast<size_t>(x.numel()) * x.element_size();
  std::vector<std::byte> bytes(n);
  if (n > 0)
    std::memcpy(bytes.data(), x.data_ptr(), n);
  return column{type, std::move(inner), std::move(bytes)};
}

value value_from(const at::Tensor& t, value_tag) {
  if (!t.defined() || t.numel() != 1)
    throw std::invalid_argument(
      "train::value: a metric tensor must hold one element: Got " +
      (t.defined() ? std::to_string(t.numel()) : std::string{"an undefined tensor"}) + ".");
  auto x = t.detach().to(torch::kCPU);
  if (x.is_floating_point() || x.is_complex())
    return x.to(torch::kDouble).item<double>();
  return static_cast<int64_t>(x.to(torch::kLong).item<int64_t>());
}

at::Tensor column_to(const column& c, std::type_identity<at::Tensor>) {
  auto scalar = c.type() == dtype::float32   ? torch::kFloat
                : c.type() == dtype::float64 ? torch::kDouble
                                             : torch::kLong;
  auto out = torch::empty(c.shape(), torch::TensorOptions().dtype(scalar));
  if (c.size_bytes() > 0)
    std::memcpy(out.data_ptr(), c.data(), c.size_bytes());
  return out;
}

} // namespace hvactor::train
