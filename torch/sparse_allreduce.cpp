// Horovod's sparse allreduce on a sparse COO tensor: every rank's indices
// (as rows: [nnz, sparse dims]) and values ([nnz, dense dims...]) travel in
// two async allgathers, then the union is coalesced, which sums the entries
// that several ranks (or one rank twice) hold.

#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "hvactor/errors.hpp"
#include "hvactor/torch.hpp"

namespace hvactor::hvd {

namespace {

std::string sub_name(const std::string& name, const char* part) {
  return name.empty() ? std::string{} : name + "." + part;
}

// A rank whose dense sizes differ from rank 0's: the same verdict on every
// rank (every rank holds the same table).
void check_sizes(const torch::Tensor& table, const std::string& name) {
  auto first = table[0];
  for (int64_t r = 1; r < table.size(0); ++r)
    if (!table[r].equal(first)) {
      auto sizes = [&](int64_t i) {
        auto row = table[i].contiguous();
        return fmt::format("[{}]", fmt::join(row.data_ptr<int64_t>(),
                                             row.data_ptr<int64_t>() + row.numel(), ", "));
      };
      throw collective_error(fmt::format(
        "hvd::sparse_allreduce{}: rank {} of the process set has a sparse tensor of sizes {} but "
        "rank 0 has {}; every rank must pass the same sizes",
        name.empty() ? "" : fmt::format(" '{}'", name), r, sizes(r), sizes(0)));
    }
}

} // namespace

sparse_handle sparse_allreduce_async(const torch::Tensor& t, op o, const std::string& name) {
  if (!t.is_sparse())
    throw std::invalid_argument(
      "hvd::sparse_allreduce: the tensor is dense (layout strided); pass a sparse COO tensor, or "
      "allreduce it as it is");
  if (o != op::average && o != op::sum)
    throw std::invalid_argument(
      fmt::format("hvd::sparse_allreduce: op::{} is not supported; a sparse allreduce sums the "
                  "gathered entries (op::sum) or averages them (op::average)",
                  to_string(o)));
  sparse_handle h;
  h.like_ = t;
  h.name_ = name;
  h.op_ = o;
  h.set_size_ = detail::set_size();
  auto sizes = torch::tensor(t.sizes().vec(), torch::kLong).reshape({1, t.dim()});
  h.sizes_ = allgather_async(sizes, sub_name(name, "sizes"));
  // Values first, as Horovod (its synchronize order).
  h.values_ = allgather_async(t._values().contiguous(), sub_name(name, "values"));
  h.indices_ = allgather_async(t._indices().transpose(0, 1).contiguous(), sub_name(name, "indices"));
  return h;
}

torch::Tensor synchronize(sparse_handle& h) {
  if (!h.like_.defined())
    throw std::invalid_argument("hvd::synchronize: empty sparse handle");
  auto like = std::move(h.like_);
  // Every gather is waited for, so that no buffer is released under one.
  std::exception_ptr first;
  torch::Tensor sizes, values, indices;
  for (auto [out, from] : {std::pair{&sizes, &h.sizes_}, {&values, &h.values_},
                           {&indices, &h.indices_}}) {
    try {
      *out = synchronize(*from);
    } catch (...) {
      if (!first)
        first = std::current_exception();
    }
  }
  if (first)
    std::rethrow_exception(first);
  check_sizes(sizes.to(torch::kCPU), h.name_);
  torch::NoGradGuard no_grad;
  auto out = torch::sparse_coo_tensor(indices.transpose(0, 1), values, like.sizes(),
                                      like.options())
               .coalesce();
  if (h.op_ == op::average && h.set_size_ > 1) {
    auto v = out._values();
    if (v.is_floating_point() || v.is_complex())
      v.div_(h.set_size_);
    else
      v.div_(h.set_size_, "trunc");
  }
  return out;
}

torch::Tensor sparse_allreduce(const torch::Tensor& t, op o, const std::string& name) {
  auto h = sparse_allreduce_async(t, o, name);
  return synchronize(h);
}

} // namespace hvactor::hvd
