// Tensor allreduce_async / synchronize / grouped_allreduce and alltoall:
// Horovod's allreduce_async_, grouped_allreduce_ and alltoall on
// torch::Tensor, each tensor on its path (tensor_path.hpp; alltoall of a
// CUDA tensor on the device backend too).

#include <cstring>
#include <numeric>
#include <stdexcept>

#include <fmt/format.h>

#include "hvactor/errors.hpp"
#include "hvactor/torch.hpp"
#include "torch/tensor_check.hpp"
#include "torch/tensor_path.hpp"

namespace hvactor::hvd {

tensor_handle allreduce_async(torch::Tensor& t, op o, std::string name, scale_factors f) {
  auto type = detail::dtype_of_tensor(t, "allreduce_async"); // hvd refuses a bool average
  torch::NoGradGuard no_grad;
  tensor_handle out;
  out.target_ = t;
  auto path = detail::path_of(t, "allreduce_async");
  if (path == detail::tensor_path::via_cpu)
    out.travel_ = t.to(torch::kCPU).contiguous();
  else if (path == detail::tensor_path::device && type == dtype::int16)
    out.travel_ = t.to(torch::kInt).contiguous(); // NCCL has no int16
  else
    out.travel_ = t.contiguous(); // `t` itself when it is contiguous
  auto& x = out.travel_;
  auto count = static_cast<size_t>(x.numel());
  // The shape travels with the operation: a rank whose tensor has another
  // shape of as many elements fails every rank (Horovod's shape check).
  if (path == detail::tensor_path::device)
    out.h_ = detail::device_allreduce_async(x.data_ptr(), count,
                                            type == dtype::int16 ? dtype::int32 : type, o,
                                            std::move(name), detail::stream_of(x), f,
                                            detail::dims(x));
  else
    out.h_ = detail::allreduce_async(x.data_ptr(), count, type, o, std::move(name), f,
                                     detail::dims(x));
  return out;
}

void synchronize(tensor_handle& h) {
  synchronize(h.h_);
  torch::NoGradGuard no_grad;
  if (h.travel_.defined() && !h.travel_.is_same(h.target_))
    h.target_.copy_(h.travel_);
  h.travel_ = torch::Tensor{};
}

void grouped_allreduce(std::vector<torch::Tensor>& ts, op o, scale_factors f, compression wire) {
  if (wire != compression::none) {
    std::vector<torch::Tensor> travel;
    for (auto& t : ts)
      travel.push_back(detail::on_the_wire(t, wire));
    grouped_allreduce(travel, o, f);
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < ts.size(); ++i)
      if (!travel[i].is_same(ts[i]))
        ts[i].copy_(travel[i]);
    return;
  }
  std::vector<tensor_handle> hs;
  hs.reserve(ts.size());
  std::exception_ptr first;
  for (auto& t : ts) {
    try {
      hs.push_back(allreduce_async(t, o, {}, f));
    } catch (...) {
      first = std::current_exception();
      break; // the ones started are still waited for below
    }
  }
  for (auto& h : hs) {
    try {
      synchronize(h);
    } catch (...) {
      if (!first)
        first = std::current_exception();
    }
  }
  if (first)
    std::rethrow_exception(first);
}

namespace {

// The rows each rank receives: `splits` checked against `rows`, or equal
// parts when empty.
std::vector<int64_t> rows_per_rank(const std::vector<int64_t>& splits, int64_t rows) {
  int n = detail::set_size();
  if (splits.empty()) {
    if (rows % n != 0)
      throw std::invalid_argument(fmt::format("hvd::alltoall: {} rows do not split into {} equal "
                                              "parts; pass splits",
                                              rows, n));
    return std::vector<int64_t>(static_cast<size_t>(n), rows / n);
  }
  if (splits.size() != static_cast<size_t>(n))
    throw std::invalid_argument(fmt::format("hvd::alltoall: {} splits for {} ranks",
                                            splits.size(), n));
  for (auto s : splits)
    if (s < 0)
      throw std::invalid_argument(fmt::format("hvd::alltoall: a negative split ({})", s));
  auto total = std::accumulate(splits.begin(), splits.end(), int64_t{0});
  if (total != rows)
    throw std::invalid_argument(
      fmt::format("hvd::alltoall: the splits add up to {} rows but the tensor has {}", total, rows));
  return splits;
}

// The received rows per rank from the received element counts.
void rows_received(const std::vector<int64_t>& counts, int64_t inner, std::vector<int64_t>* out) {
  if (!out)
    return;
  out->clear();
  for (auto r : counts)
    out->push_back(inner > 0 ? r / inner : 0);
}

// A CUDA tensor's alltoall on the device backend: the result is
// allocated, once the received counts are known, on the caller's stream.
torch::Tensor alltoall_on_device(const torch::Tensor& c, const std::vector<int64_t>& send_counts,
                                 int64_t inner, std::vector<int64_t>* received_splits) {
  auto type = detail::dtype_of_tensor(c, "alltoall");
  auto allocate = detail::allocator_here(c.options());
  torch::Tensor out;
  auto shape = c.sizes().vec();
  auto counts = detail::device_alltoall(
    c.data_ptr(), static_cast<size_t>(c.numel()), send_counts, type, detail::stream_of(c),
    [&](std::span<const int64_t> received) -> void* {
      auto total = std::accumulate(received.begin(), received.end(), int64_t{0});
      shape[0] = inner > 0 ? total / inner : 0;
      out = allocate(shape);
      return out.data_ptr();
    });
  rows_received(counts, inner, received_splits);
  return out;
}

} // namespace

torch::Tensor alltoall(const torch::Tensor& t, const std::vector<int64_t>& splits,
                       std::vector<int64_t>* received_splits) {
  if (t.dim() == 0)
    throw std::invalid_argument("hvd::alltoall: a 0-dimensional tensor has no rows to split");
  auto type = detail::dtype_of_tensor(t, "alltoall");
  auto path = detail::path_of(t, "alltoall"); // a CUDA tensor on another GPU is refused
  auto parts = rows_per_rank(splits, t.size(0));
  auto c = t.contiguous();
  // Every dimension but the first must agree, or the rows received here
  // would be cut to the wrong shape: checked on every rank alike.
  auto call = detail::call_name("alltoall", "");
  detail::check_allgather(detail::exchange({&c, 1}, call), call);
  int64_t inner = 1;
  for (int64_t d = 1; d < c.dim(); ++d)
    inner *= c.size(d);
  std::vector<int64_t> send_counts;
  for (auto p : parts)
    send_counts.push_back(p * inner);
  if (path == detail::tensor_path::device)
    return alltoall_on_device(c, send_counts, inner, received_splits);
  auto host = c.is_cpu() ? c : c.to(torch::kCPU); // no device backend: through the CPU
  std::vector<int64_t> recv_counts;
  auto bytes = detail::alltoall(host.data_ptr(), static_cast<size_t>(host.numel()), send_counts,
                                type, &recv_counts);
  auto shape = c.sizes().vec();
  shape[0] = inner > 0 ? static_cast<int64_t>(bytes.size() / size_of(type)) / inner : 0;
  auto out = torch::empty(shape, host.options());
  if (!bytes.empty())
    std::memcpy(out.data_ptr(), bytes.data(), bytes.size());
  rows_received(recv_counts, inner, received_splits);
  return c.is_cpu() ? out : out.to(c.device());
}

} // namespace hvactor::hvd
