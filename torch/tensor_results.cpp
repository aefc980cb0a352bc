// The tensor collectives that return a new tensor, queued (Horovod's
// allgather_async, broadcast_async, alltoall_async, reducescatter_async):
// the data travels through hvd's async calls on a CPU copy (alltoall and
// reducescatter of a CUDA tensor: on the device backend, when the job has
// one), and where the ranks' shapes matter their descriptions travel
// alongside in an async allgather of their own, checked at synchronize()
// on every rank alike.

#include <cstring>
#include <numeric>
#include <stdexcept>

#include <fmt/format.h>

#include "hvactor/errors.hpp"
#include "hvactor/torch.hpp"
#include "torch/tensor_check.hpp"
#include "torch/tensor_path.hpp"

namespace hvactor::hvd {

namespace {

int64_t row_elements(const torch::Tensor& t) {
  int64_t inner = 1;
  for (int64_t d = 1; d < t.dim(); ++d)
    inner *= t.size(d);
  return inner;
}

// The source on the CPU, contiguous (a CUDA tensor through a copy), after
// the checks every call makes first.
torch::Tensor cpu_source(const torch::Tensor& t, const char* call) {
  detail::dtype_of_tensor(t, call);
  detail::path_of(t, call); // a CUDA tensor on another GPU is refused
  return t.is_cpu() ? t.contiguous() : t.to(torch::kCPU).contiguous();
}

// Queues the exchange of this rank's description of `c` (the words live
// with the call: a handle dropped unsynchronized frees nothing it reads).
void exchange_shapes(tensor_result_handle& h, const torch::Tensor& c, const std::string& name) {
  h.set_rank_ = detail::set_rank();
  h.set_size_ = detail::set_size();
  auto words = std::make_shared<std::vector<int64_t>>();
  detail::describe({&c, 1}, *words);
  h.shape_result_ = std::make_shared<detail::async_result>();
  h.shape_result_->keep_alive = words;
  h.shapes_ = detail::allgather_async(words->data(), words->size(), dtype::int64,
                                      name.empty() ? std::string{} : name + ".shapes",
                                      h.shape_result_);
}

// The result's holder, owning the tensor that travels.
std::shared_ptr<detail::async_result> result_owning(const torch::Tensor& c) {
  auto r = std::make_shared<detail::async_result>();
  r->keep_alive = std::make_shared<torch::Tensor>(c);
  return r;
}

// The table of every rank's description, once the exchange finished.
detail::desc_table shapes_of(tensor_result_handle& h, const std::string& call) {
  auto words = detail::as_vector<int64_t>(h.shape_result_->bytes);
  return detail::split_descs(words, h.set_size_, call);
}

torch::Tensor from_bytes(const std::vector<char>& bytes, std::vector<int64_t> shape,
                         const torch::TensorOptions& options) {
  auto out = torch::empty(shape, options);
  if (!bytes.empty())
    std::memcpy(out.data_ptr(), bytes.data(), bytes.size());
  return out;
}

torch::Tensor on_device(const torch::Tensor& out, const torch::Device& device) {
  return device.is_cpu() ? out : out.to(device);
}

// A CUDA tensor on the device backend's path (the job has one).
bool on_device_path(const torch::Tensor& t, const char* call) {
  detail::dtype_of_tensor(t, call);
  return detail::path_of(t, call) == detail::tensor_path::device;
}

int64_t rows_of(int64_t elements, int64_t inner) {
  return inner > 0 ? elements / inner : 0;
}

// alltoall_async of a CUDA tensor on the device backend: the result is
// allocated on the engine's thread once the counts are known, as on the
// caller's stream; the shapes are checked at synchronize().
tensor_result_handle alltoall_on_device(const torch::Tensor& c, const std::vector<int64_t>& counts,
                                        int64_t inner, const std::string& name) {
  tensor_result_handle h;
  h.source_ = c;
  auto call = detail::call_name("alltoall", name);
  auto out = std::make_shared<torch::Tensor>();
  h.finish_ = [call, out, inner](tensor_result_handle& hh, std::vector<int64_t>* received) {
    detail::check_allgather(shapes_of(hh, call), call);
    if (received) {
      received->clear();
      for (auto e : hh.data_result_->counts)
        received->push_back(rows_of(e, inner));
    }
    return *out;
  };
  exchange_shapes(h, c, name);
  h.data_result_ = result_owning(c);
  auto allocate = detail::allocator_here(c.options());
  auto shape = c.sizes().vec();
  detail::device_allocator into = [allocate, out, shape, inner](
                                    std::span<const int64_t> received) mutable -> void* {
    shape[0] = rows_of(std::accumulate(received.begin(), received.end(), int64_t{0}), inner);
    *out = allocate(shape);
    return out->data_ptr();
  };
  h.data_ = detail::device_alltoall_async(c.data_ptr(), static_cast<size_t>(c.numel()), counts,
                                          detail::dtype_of_tensor(c, "alltoall_async"), name,
                                          detail::stream_of(c), std::move(into), h.data_result_);
  return h;
}

// reducescatter_async of a CUDA tensor on the device backend (int16 as
// int32: NCCL has none), into a part allocated here.
tensor_result_handle reducescatter_on_device(const torch::Tensor& t, op o,
                                             const std::string& name, scale_factors f) {
  auto type = detail::dtype_of_tensor(t, "reducescatter_async");
  auto c = type == dtype::int16 ? t.to(torch::kInt).contiguous() : t.contiguous();
  auto count = static_cast<size_t>(c.numel());
  auto row = count == 0 ? size_t{1} : static_cast<size_t>(row_elements(c));
  auto shape = c.sizes().vec();
  int64_t rows = shape[0], n = detail::set_size();
  shape[0] = rows / n + (detail::set_rank() < rows % n ? 1 : 0);
  auto out = torch::empty(shape, c.options());
  tensor_result_handle h;
  h.source_ = c;
  auto call = detail::call_name("reducescatter", name);
  auto scalar = t.scalar_type();
  h.finish_ = [call, out, scalar](tensor_result_handle& hh, std::vector<int64_t>*) {
    detail::check_same(shapes_of(hh, call), call);
    return out.scalar_type() == scalar ? out : out.to(scalar);
  };
  exchange_shapes(h, t, name);
  h.data_result_ = result_owning(c);
  h.data_ = detail::device_reducescatter_async(
    c.data_ptr(), count, row, out.data_ptr(), type == dtype::int16 ? dtype::int32 : type, o, name,
    detail::stream_of(c), f, std::make_shared<std::vector<torch::Tensor>>(std::vector{c, out}));
  return h;
}

} // namespace

torch::Tensor synchronize(tensor_result_handle& h, std::vector<int64_t>* received_splits) {
  if (!h.finish_)
    throw std::invalid_argument("hvd::synchronize: empty tensor handle");
  if (h.shapes_.op_)
    synchronize(h.shapes_);
  synchronize(h.data_);
  auto finish = std::move(h.finish_);
  auto out = finish(h, received_splits);
  h.source_ = torch::Tensor{};
  return out;
}

tensor_result_handle allgather_async(const torch::Tensor& t, const std::string& name) {
  auto c = cpu_source(t, "allgather_async");
  tensor_result_handle h;
  h.source_ = c;
  auto call = detail::call_name("allgather", name);
  auto device = t.device();
  h.finish_ = [call, device](tensor_result_handle& hh, std::vector<int64_t>*) {
    auto table = shapes_of(hh, call);
    detail::check_allgather(table, call);
    std::vector<int64_t> shape{hh.set_size_}; // 0-dimensional: one element per rank
    if (hh.source_.dim() > 0) {
      shape = hh.source_.sizes().vec();
      shape[0] = 0;
      for (auto& d : table)
        shape[0] += d[0].sizes[0];
    }
    return on_device(from_bytes(hh.data_result_->bytes, shape, hh.source_.options()), device);
  };
  exchange_shapes(h, c, name);
  h.data_result_ = result_owning(c);
  h.data_ = detail::allgather_async(c.data_ptr(), static_cast<size_t>(c.numel()),
                                    detail::dtype_of_tensor(c, "allgather_async"), name,
                                    h.data_result_);
  return h;
}

tensor_result_handle broadcast_async(const torch::Tensor& t, int root, const std::string& name) {
  // A copy travels: the caller's tensor is left as it is.
  auto c = cpu_source(t, "broadcast_async").clone();
  tensor_result_handle h;
  h.source_ = c;
  auto device = t.device();
  h.finish_ = [device](tensor_result_handle& hh, std::vector<int64_t>*) {
    return on_device(hh.source_, device);
  };
  h.data_ = detail::broadcast_async(c.data_ptr(), static_cast<size_t>(c.numel()),
                                    detail::dtype_of_tensor(c, "broadcast_async"), root, name,
                                    std::make_shared<torch::Tensor>(c));
  return h;
}

tensor_result_handle alltoall_async(const torch::Tensor& t, const std::vector<int64_t>& splits,
                                    const std::string& name) {
  if (t.dim() == 0)
    throw std::invalid_argument("hvd::alltoall: a 0-dimensional tensor has no rows to split");
  auto c = on_device_path(t, "alltoall_async") ? t.contiguous() : cpu_source(t, "alltoall_async");
  int64_t inner = row_elements(c), rows = c.size(0), n = detail::set_size();
  std::vector<int64_t> counts;
  if (splits.empty()) {
    if (rows % n != 0)
      throw std::invalid_argument(fmt::format(
        "hvd::alltoall: {} rows do not split into {} equal parts; pass splits", rows, n));
    counts.assign(static_cast<size_t>(n), rows / n * inner);
  } else {
    if (splits.size() != static_cast<size_t>(n) ||
        std::any_of(splits.begin(), splits.end(), [](int64_t s) { return s < 0; }) ||
        std::accumulate(splits.begin(), splits.end(), int64_t{0}) != rows)
      throw std::invalid_argument(fmt::format(
        "hvd::alltoall: splits must be {} non-negative row counts adding up to {}", n, rows));
    for (auto s : splits)
      counts.push_back(s * inner);
  }
  if (c.is_cuda())
    return alltoall_on_device(c, counts, inner, name);
  tensor_result_handle h;
  h.source_ = c;
  auto call = detail::call_name("alltoall", name);
  auto device = t.device();
  h.finish_ = [call, device, inner](tensor_result_handle& hh, std::vector<int64_t>* received) {
    detail::check_allgather(shapes_of(hh, call), call);
    auto& r = *hh.data_result_;
    auto shape = hh.source_.sizes().vec();
    shape[0] = inner > 0 ? static_cast<int64_t>(r.bytes.size() / size_of(detail::dtype_of_tensor(
                                                                    hh.source_, "alltoall"))) / inner
                         : 0;
    if (received) {
      received->clear();
      for (auto e : r.counts)
        received->push_back(inner > 0 ? e / inner : 0);
    }
    return on_device(from_bytes(r.bytes, shape, hh.source_.options()), device);
  };
  exchange_shapes(h, c, name);
  h.data_result_ = result_owning(c);
  h.data_ = detail::alltoall_async(c.data_ptr(), static_cast<size_t>(c.numel()), counts,
                                   detail::dtype_of_tensor(c, "alltoall_async"), name,
                                   h.data_result_);
  return h;
}

tensor_result_handle reducescatter_async(const torch::Tensor& t, op o, const std::string& name,
                                         scale_factors f) {
  if (t.dim() == 0)
    throw std::invalid_argument("hvd::reducescatter: a 0-dimensional tensor has no rows to split");
  if (on_device_path(t, "reducescatter_async"))
    return reducescatter_on_device(t, o, name, f);
  auto c = cpu_source(t, "reducescatter_async");
  auto count = static_cast<size_t>(c.numel());
  auto row = count == 0 ? size_t{1} : static_cast<size_t>(row_elements(c));
  tensor_result_handle h;
  h.source_ = c;
  auto call = detail::call_name("reducescatter", name);
  auto device = t.device();
  h.finish_ = [call, device](tensor_result_handle& hh, std::vector<int64_t>*) {
    detail::check_same(shapes_of(hh, call), call);
    auto shape = hh.source_.sizes().vec();
    int64_t rows = shape[0], n = hh.set_size_;
    shape[0] = rows / n + (hh.set_rank_ < rows % n ? 1 : 0);
    return on_device(from_bytes(hh.data_result_->bytes, shape, hh.source_.options()), device);
  };
  exchange_shapes(h, c, name);
  h.data_result_ = result_owning(c);
  h.data_ = detail::reducescatter_async(c.data_ptr(), count, row,
                                        detail::dtype_of_tensor(c, "reducescatter_async"), o, f,
                                        name, h.data_result_);
  return h;
}

} // namespace hvactor::hvd
