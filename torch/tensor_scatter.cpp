// Horovod's reducescatter and grouped_reducescatter on torch::Tensor: the
// dtypes and shapes checked on every rank first (one exchange), then hvd's
// reducescatter of the rows (dimension 0) on the CPU.

#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

#include "hvactor/torch.hpp"
#include "torch/tensor_check.hpp"
#include "torch/tensor_path.hpp"

namespace hvactor::hvd {

namespace {

// One tensor's reducescatter: its CPU input, the elements per row (the
// product of the other dimensions) and this rank's part of the rows.
struct scatter_plan {
  torch::Tensor host;
  size_t count = 0;
  size_t row = 1;
  std::vector<int64_t> out_shape;
};

scatter_plan plan(const torch::Tensor& t) {
  if (t.dim() == 0)
    throw std::invalid_argument("hvd::reducescatter: a 0-dimensional tensor has no rows to split");
  detail::path_of(t, "reducescatter"); // a CUDA tensor on another GPU is refused
  scatter_plan p;
  // No device reducescatter: through the CPU.
  p.host = t.is_cpu() ? t.contiguous() : t.to(torch::kCPU).contiguous();
  p.count = static_cast<size_t>(p.host.numel());
  for (int64_t d = 1; d < p.host.dim(); ++d)
    p.row *= static_cast<size_t>(p.host.size(d));
  int64_t rows = p.host.size(0), n = detail::set_size();
  p.out_shape = p.host.sizes().vec();
  p.out_shape[0] = rows / n + (detail::set_rank() < rows % n ? 1 : 0);
  if (p.count == 0)
    p.row = 1; // rows of nothing: every rank gets an empty part
  return p;
}

// The checks every rank makes alike before any data moves.
std::vector<scatter_plan> plans(std::span<const torch::Tensor> ts, const std::string& name) {
  std::vector<scatter_plan> out;
  std::vector<torch::Tensor> hosts;
  for (auto& t : ts) {
    detail::dtype_of_tensor(t, "reducescatter");
    out.push_back(plan(t));
    hosts.push_back(out.back().host);
  }
  auto call = detail::call_name("reducescatter", name);
  detail::check_same(detail::exchange(hosts, call), call);
  return out;
}

torch::Tensor on_device_of(const torch::Tensor& out, const torch::Tensor& like) {
  return like.is_cpu() ? out : out.to(like.device());
}

} // namespace

torch::Tensor reducescatter(const torch::Tensor& t, op o, scale_factors f,
                            const std::string& name, compression wire) {
  if (auto w = detail::on_the_wire(t, wire); !w.is_same(t))
    return reducescatter(w, o, f, name).to(t.scalar_type());
  auto type = detail::dtype_of_tensor(t, "reducescatter");
  torch::NoGradGuard no_grad;
  auto p = std::move(plans({&t, 1}, name)[0]);
  auto out = torch::empty(p.out_shape, p.host.options());
  detail::reducescatter(p.host.data_ptr(), p.count, p.row, out.data_ptr(), type, o, f, name);
  return on_device_of(out, t);
}

std::vector<torch::Tensor> grouped_reducescatter(const std::vector<torch::Tensor>& ts, op o,
                                                 scale_factors f, compression wire) {
  if (wire != compression::none) {
    std::vector<torch::Tensor> travel;
    for (auto& t : ts)
      travel.push_back(detail::on_the_wire(t, wire));
    auto parts = grouped_reducescatter(travel, o, f);
    for (size_t i = 0; i < parts.size(); ++i)
      parts[i] = parts[i].to(ts[i].scalar_type());
    return parts;
  }
  torch::NoGradGuard no_grad;
  auto ps = plans(ts, {});
  std::vector<std::shared_ptr<detail::async_result>> results;
  std::vector<handle> hs;
  std::exception_ptr first;
  for (size_t i = 0; i < ts.size(); ++i) {
    try {
      auto type = detail::dtype_of_tensor(ts[i], "grouped_reducescatter");
      results.push_back(std::make_shared<detail::async_result>());
      hs.push_back(detail::reducescatter_async(ps[i].host.data_ptr(), ps[i].count, ps[i].row,
                                               type, o, f, {}, results.back()));
    } catch (...) {
      first = std::current_exception();
      break; // the ones started are still waited for below
    }
  }
  std::vector<torch::Tensor> out;
  for (size_t i = 0; i < hs.size(); ++i) {
    try {
      synchronize(hs[i]);
      auto part = torch::empty(ps[i].out_shape, ps[i].host.options());
      auto& bytes = results[i]->bytes;
      if (!bytes.empty())
        std::memcpy(part.data_ptr(), bytes.data(), bytes.size());
      out.push_back(on_device_of(part, ts[i]));
    } catch (...) {
      if (!first)
        first = std::current_exception();
    }
  }
  if (first)
    std::rethrow_exception(first);
  return out;
}

} // namespace hvactor::hvd
