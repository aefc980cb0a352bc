#include "hvactor/torch.hpp"

#include "hvactor/errors.hpp"
#include "torch/optimizer_state.hpp"
#include "torch/tensor_check.hpp"
#include "torch/tensor_path.hpp"

#include <algorithm>
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

// An in-place collective on `t` along its path: `host(c)` on a contiguous
// CPU tensor, `device(c, stream)` on a contiguous CUDA tensor, and for a
// CUDA tensor without a device backend `host` on a CPU copy, copied back.
template <class Host, class Device>
void in_place(torch::Tensor& t, const char* call, Host&& host, Device&& device) {
  switch (detail::path_of(t, call)) {
    case detail::tensor_path::host:
      on_contiguous(t, host);
      return;
    case detail::tensor_path::device:
      on_contiguous(t, [&](torch::Tensor& c) { device(c, detail::stream_of(c)); });
      return;
    case detail::tensor_path::via_cpu: {
      auto c = t.to(torch::kCPU).contiguous();
      host(c);
      t.copy_(c);
      return;
    }
  }
}

size_t elements(const torch::Tensor& t) {
  return static_cast<size_t>(t.numel());
}

} // namespace

torch::Tensor detail::on_the_wire(const torch::Tensor& t, compression wire) {
  if (wire == compression::fp16 && (t.scalar_type() == torch::kFloat || t.scalar_type() == torch::kDouble))
    return t.to(torch::kHalf);
  return t;
}

void allreduce(torch::Tensor& t, op o, scale_factors f, compression wire) {
  if (auto w = detail::on_the_wire(t, wire); !w.is_same(t)) {
    allreduce(w, o, f);
    torch::NoGradGuard no_grad;
    t.copy_(w);
    return;
  }
  auto type = detail::dtype_of_tensor(t, "allreduce"); // hvd refuses a bool average
  torch::NoGradGuard no_grad;
  in_place(
    t, "allreduce",
    [&](torch::Tensor& c) {
      detail::allreduce(c.data_ptr(), elements(c), type, o, {}, f, detail::dims(c));
    },
    [&](torch::Tensor& c, cuda_stream s) {
      if (type == dtype::int16) { // NCCL has no int16: reduced as int32
        auto wide = c.to(torch::kInt);
        detail::device_allreduce(wide.data_ptr(), elements(wide), dtype::int32, o,
                                 detail::stream_of(wide), f, detail::dims(wide));
        c.copy_(wide);
        return;
      }
      detail::device_allreduce(c.data_ptr(), elements(c), type, o, s, f, detail::dims(c));
    });
}

namespace {

// allgather of a contiguous CUDA tensor on the device backend, which
// gathers equal sizes: rows that differ between ranks travel padded to the
// longest rank's, and the padding is cut out after.
torch::Tensor gather_on_device(const torch::Tensor& c, const detail::desc_table& table,
                               const std::vector<int64_t>& shape, dtype type) {
  std::vector<int64_t> rows;
  for (auto& rank_descs : table)
    rows.push_back(rank_descs.front().sizes.empty() ? 1 : rank_descs.front().sizes[0]);
  auto longest = *std::max_element(rows.begin(), rows.end());
  int64_t inner = 1; // elements per row
  for (int64_t d = 1; d < c.dim(); ++d)
    inner *= c.size(d);
  auto out = torch::empty(shape, c.options());
  bool equal = std::all_of(rows.begin(), rows.end(), [&](int64_t r) { return r == longest; });
  if (equal) {
    detail::device_allgather(c.data_ptr(), out.data_ptr(), elements(c), type,
                             detail::stream_of(c));
    return out;
  }
  auto padded = torch::zeros({longest * inner}, c.options());
  padded.narrow(0, 0, c.numel()).copy_(c.reshape({-1}));
  auto all = torch::empty({static_cast<int64_t>(rows.size()) * longest * inner}, c.options());
  detail::device_allgather(padded.data_ptr(), all.data_ptr(), elements(padded), type,
                           detail::stream_of(padded));
  auto flat = out.view({-1});
  int64_t at = 0;
  for (size_t r = 0; r < rows.size(); ++r) {
    flat.narrow(0, at, rows[r] * inner)
      .copy_(all.narrow(0, static_cast<int64_t>(r) * longest * inner, rows[r] * inner));
    at += rows[r] * inner;
  }
  return out;
}

} // namespace

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
  auto path = detail::path_of(c, "allgather");
  if (path == detail::tensor_path::device)
    return gather_on_device(c, table, shape, type);
  auto host = path == detail::tensor_path::host ? c : c.to(torch::kCPU);
  auto out = torch::empty(shape, host.options());
  auto bytes = detail::allgather(host.data_ptr(), elements(host), type);
  if (bytes.size() != static_cast<size_t>(bytes_out))
    throw collective_error(fmt::format("{}: received {} bytes, but the ranks' shapes make {}",
                                       call, bytes.size(), bytes_out));
  if (!bytes.empty())
    std::memcpy(out.data_ptr(), bytes.data(), bytes.size());
  return path == detail::tensor_path::host ? out : out.to(c.device());
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
  in_place(
    t, "broadcast",
    [&](torch::Tensor& c) { detail::broadcast(c.data_ptr(), elements(c), type, root); },
    [&](torch::Tensor& c, cuda_stream s) {
      detail::device_broadcast(c.data_ptr(), elements(c), type, root, s);
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
