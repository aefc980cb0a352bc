#include "hvactor/torch.hpp"

#include "hvactor/errors.hpp"
#include "torch/optimizer_state.hpp"
#include "torch/tensor_check.hpp"

#include <cstring>
#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace hvactor::hvd {

namespace {

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
  auto type = detail::dtype_of_tensor(t, "allreduce");
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
  auto type = detail::dtype_of_tensor(c, "allgather");
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
  auto type = detail::dtype_of_tensor(t, "broadcast");
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

void broadcast_optimizer_state(distributed_optimizer& opt, int root) {
  broadcast_optimizer_state(opt.inner(), root);
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
