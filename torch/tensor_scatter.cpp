// Horovod's reducescatter and grouped_reducescatter on torch::Tensor: the
// dtypes and shapes checked on every rank first (one exchange), then hvd's
// reducescatter of the rows (dimension 0): on the GPU for a CUDA tensor
// when the job has a device backend, else on the CPU (a CUDA tensor
// through a copy).

#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

#include "hvactor/torch.hpp"
#include "torch/tensor_check.hpp"
#include "torch/tensor_path.hpp"

namespace hvactor::hvd {

namespace {

// One tensor's reducescatter: what travels (contiguous: the tensor itself
// on the device path, int16 as int32 there since NCCL has no int16; a CPU
// copy otherwise), the elements per row (the product of the other
// dimensions) and this rank's part of the rows.
struct scatter_plan {
  torch::Tensor travel;
  bool device = false;
  dtype type = dtype::float32;
  size_t count = 0;
  size_t row = 1;
  std::vector<int64_t> out_shape;
};

scatter_plan plan(const torch::Tensor& t, const char* call) {
  if (t.dim() == 0)
    throw std::invalid_argument("hvd::reducescatter: a 0-dimensional tensor has no rows to split");
  scatter_plan p;
  p.type = detail::dtype_of_tensor(t, call);
  // A CUDA tensor on another GPU is refused; without a device backend it
  // goes through a CPU copy.
  auto path = detail::path_of(t, call);
  p.device = path == detail::tensor_path::device;
  if (p.device && p.type == dtype::int16) {
    p.travel = t.to(torch::kInt).contiguous();
    p.type = dtype::int32;
  } else {
    p.travel = path == detail::tensor_path::via_cpu ? t.to(torch::kCPU).contiguous() : t.contiguous();
  }
  p.count = static_cast<size_t>(p.travel.numel());
  for (int64_t d = 1; d < p.travel.dim(); ++d)
    p.row *= static_cast<size_t>(p.travel.size(d));
  int64_t rows = p.travel.size(0), n = detail::set_size();
  p.out_shape = p.travel.sizes().vec();
  p.out_shape[0] = rows / n + (detail::set_rank() < rows % n ? 1 : 0);
  if (p.count == 0)
    p.row = 1; // rows of nothing: every rank gets an empty part
  return p;
}

// The checks every rank makes alike before any data moves (on the
// tensors as they are: a CUDA tensor of the device path as such, the CPU
// copy of another).
std::vector<scatter_plan> plans(std::span<const torch::Tensor> ts, const std::string& name,
                                const char* call) {
  std::vector<scatter_plan> out;
  std::vector<torch::Tensor> described;
  for (auto& t : ts) {
    out.push_back(plan(t, call));
    described.push_back(out.back().device ? t : out.back().travel);
  }
  auto label = detail::call_name("reducescatter", name);
  detail::check_same(detail::exchange(described, label), label);
  return out;
}

// The part as the caller's tensor was: its device and dtype.
torch::Tensor as_input(const torch::Tensor& out, const torch::Tensor& like) {
  auto r = like.is_cpu() || out.device() == like.device() ? out : out.to(like.device());
  return r.scalar_type() == like.scalar_type() ? r : r.to(like.scalar_type());
}

} // namespace

torch::Tensor reducescatter(const torch::Tensor& t, op o, scale_factors f,
                            const std::string& name, compression wire) {
  if (auto w = detail::on_the_wire(t, wire); !w.is_same(t))
    return reducescatter(w, o, f, name).to(t.scalar_type());
  torch::NoGradGuard no_grad;
  auto p = std::move(plans({&t, 1}, name, "reducescatter")[0]);
  auto out = torch::empty(p.out_shape, p.travel.options());
  if (p.device)
    detail::device_reducescatter(p.travel.data_ptr(), p.count, p.row, out.data_ptr(), p.type, o,
                                 detail::stream_of(p.travel), f, name);
  else
    detail::reducescatter(p.travel.data_ptr(), p.count, p.row, out.data_ptr(), p.type, o, f,
                          name);
  return as_input(out, t);
}

namespace {

// Queues one planned reducescatter of a group; a device one writes into
// `part` (allocated here), a host one into `result`.
handle queue_part(scatter_plan& p, torch::Tensor& part,
                  const std::shared_ptr<detail::async_result>& result, op o, scale_factors f) {
  if (p.device) {
    part = torch::empty(p.out_shape, p.travel.options());
    return detail::device_reducescatter_async(p.travel.data_ptr(), p.count, p.row,
                                              part.data_ptr(), p.type, o, {},
                                              detail::stream_of(p.travel), f,
                                              std::make_shared<torch::Tensor>(p.travel));
  }
  return detail::reducescatter_async(p.travel.data_ptr(), p.count, p.row, p.type, o, f, {},
                                     result);
}

} // namespace

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
  auto ps = plans(ts, {}, "grouped_reducescatter");
  std::vector<std::shared_ptr<detail::async_result>> results;
  std::vector<torch::Tensor> parts(ts.size());
  std::vector<handle> hs;
  std::exception_ptr first;
  for (size_t i = 0; i < ts.size(); ++i) {
    try {
      results.push_back(std::make_shared<detail::async_result>());
      hs.push_back(queue_part(ps[i], parts[i], results.back(), o, f));
    } catch (...) {
      first = std::current_exception();
      break; // the ones started are still waited for below
    }
  }
  std::vector<torch::Tensor> out;
  for (size_t i = 0; i < hs.size(); ++i) {
    try {
      synchronize(hs[i]);
      if (!ps[i].device) {
        parts[i] = torch::empty(ps[i].out_shape, ps[i].travel.options());
        auto& bytes = results[i]->bytes;
        if (!bytes.empty())
          std::memcpy(parts[i].data_ptr(), bytes.data(), bytes.size());
      }
      out.push_back(as_input(parts[i], ts[i]));
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
