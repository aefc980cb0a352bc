#include "hvactor/torch.hpp"

#include "hvactor/elastic.hpp"

#include <cstring>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>

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

torch::Tensor allgather(const torch::Tensor& t) {
  auto type = dtype_of_tensor(t, "allgather");
  auto c = t.contiguous();
  auto bytes = detail::allgather(c.data_ptr(), static_cast<size_t>(c.numel()), type);
  auto row = c.dim() == 0 ? 1 : c.numel() / std::max<int64_t>(1, c.size(0));
  auto elems = static_cast<int64_t>(bytes.size() / size_of(type));
  std::vector<int64_t> shape = c.sizes().vec();
  if (shape.empty())
    shape = {elems};
  else
    shape[0] = row == 0 ? 0 : elems / row;
  auto out = torch::empty(shape, c.options());
  if (!bytes.empty())
    std::memcpy(out.data_ptr(), bytes.data(), bytes.size());
  return out;
}

void broadcast(torch::Tensor& t, int root) {
  auto type = dtype_of_tensor(t, "broadcast");
  torch::NoGradGuard no_grad;
  on_contiguous(t, [&](torch::Tensor& c) {
    detail::broadcast(c.data_ptr(), static_cast<size_t>(c.numel()), type, root);
  });
}

void broadcast_parameters(const std::vector<torch::Tensor>& params, int root) {
  torch::NoGradGuard no_grad;
  for (auto p : params) // a Tensor is a handle: the parameter itself changes
    broadcast(p, root);
}

void broadcast_optimizer_state(torch::optim::Optimizer& opt, int root) {
  std::vector<char> blob;
  if (rank() == root) {
    torch::serialize::OutputArchive archive;
    opt.save(archive);
    std::ostringstream out;
    archive.save_to(out);
    auto text = out.str();
    blob.assign(text.begin(), text.end());
  }
  elastic::detail::broadcast_bytes(blob, root);
  if (rank() == root)
    return;
  std::istringstream in{std::string(blob.begin(), blob.end())};
  torch::serialize::InputArchive archive;
  archive.load_from(in);
  opt.load(archive);
}

distributed_optimizer::distributed_optimizer(torch::optim::Optimizer& inner,
                                             int backward_passes_per_step, op reduction)
  : inner_(inner), passes_(backward_passes_per_step), reduction_(reduction) {
  if (passes_ < 1)
    throw std::invalid_argument(fmt::format(
      "hvd::distributed_optimizer: backward_passes_per_step must be >= 1: Got {}.", passes_));
  if (reduction_ != op::average && reduction_ != op::sum)
    throw std::invalid_argument(
      "hvd::distributed_optimizer: gradients are combined with op::average or op::sum");
}

void distributed_optimizer::zero_grad() {
  if (calls_ % passes_ == 0)
    inner_.zero_grad();
}

bool distributed_optimizer::step() {
  if (++calls_ % passes_ != 0)
    return false;
  // One async allreduce per gradient: the engine fuses them into as few
  // Gloo operations as the fusion threshold allows.
  std::vector<torch::Tensor> grads;
  std::vector<handle> handles;
  torch::NoGradGuard no_grad;
  int index = 0;
  for (auto& group : inner_.param_groups())
    for (auto& p : group.params()) {
      ++index;
      if (!p.grad().defined())
        continue;
      auto g = p.grad();
      if (!g.is_contiguous()) {
        g = g.contiguous();
        p.mutable_grad() = g;
      }
      auto type = dtype_of_tensor(g, "distributed_optimizer");
      handles.push_back(detail::allreduce_async(g.data_ptr(), static_cast<size_t>(g.numel()),
                                                type, reduction_,
                                                fmt::format("grad.{}", index)));
      grads.push_back(g);
    }
  for (auto& h : handles)
    synchronize(h);
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
