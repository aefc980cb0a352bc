#pragma once

/// Horovod's collectives on C++ buffers (part of hvactor/hvd.hpp):
/// allreduce, allgather, broadcast, alltoall and reducescatter, each
/// synchronous, async and grouped where Horovod has them.

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "hvactor/hvd_core.hpp"
#include "hvactor/hvd_types.hpp"

namespace hvactor::hvd {

namespace detail {

// The type-erased operations behind the templates below. `shape`: the
// tensor's dimensions, when the caller has them (the LibTorch adapter):
// every rank must pass the same (Horovod's shape check); empty: [count].
void allreduce(void* data, size_t count, dtype t, op o, const std::string& name,
               scale_factors f = {}, std::span<const int64_t> shape = {});
std::vector<char> allgather(const void* data, size_t count, dtype t);
void allgather_into(const void* in, size_t count, void* out, size_t out_count, dtype t);
void broadcast(void* data, size_t count, dtype t, int root);
std::vector<char> alltoall(const void* data, size_t count, std::span<const int64_t> send_counts,
                           dtype t, std::vector<int64_t>* recv_counts);

} // namespace detail


/// Sums (or averages, ...) `x` element-wise across ranks, in place; `f`
/// scales the input before and the result after (Horovod's
/// prescale_factor / postscale_factor).
template <element T>
void allreduce(std::span<T> x, op o = op::average, scale_factors f = {}) {
  detail::allreduce(x.data(), x.size(), dtype_of<T>(), o, {}, f);
}

/// Every rank's `x`, concatenated in rank order. Sizes may differ per rank.
template <element T>
std::vector<std::remove_const_t<T>> allgather(std::span<T> x) {
  using U = std::remove_const_t<T>;
  return detail::as_vector<U>(detail::allgather(x.data(), x.size(), dtype_of<U>()));
}

/// Every rank's `in` into `out`, in rank order, without allocating (as
/// MPI_Allgather): every rank passes the same in.size(), and out holds
/// size() x in.size() elements; std::invalid_argument otherwise (on every
/// rank, when the ranks' sizes differ).
template <element T>
void allgather(std::span<const T> in, std::span<T> out) {
  detail::allgather_into(in.data(), in.size(), out.data(), out.size(), dtype_of<T>());
}

/// Overwrites `x` on every rank with root's `x` (equal sizes on all ranks).
template <element T>
void broadcast(std::span<T> x, int root) {
  detail::broadcast(x.data(), x.size(), dtype_of<T>(), root);
}

/// Sends the i-th of size() equal parts of `x` to rank i; returns the parts
/// received, in rank order. x.size() must be a multiple of size().
template <element T>
std::vector<std::remove_const_t<T>> alltoall(std::span<T> x) {
  using U = std::remove_const_t<T>;
  std::vector<int64_t> counts;
  return detail::as_vector<U>(detail::alltoall(x.data(), x.size(), counts, dtype_of<U>(), nullptr));
}

/// Sends `send_counts[i]` consecutive elements of `x` to rank i; returns what
/// every rank sent to this one, in rank order, and their counts in
/// `recv_counts` when given.
template <element T>
std::vector<std::remove_const_t<T>> alltoall(std::span<T> x, std::span<const int64_t> send_counts,
                                             std::vector<int64_t>* recv_counts = nullptr) {
  using U = std::remove_const_t<T>;
  return detail::as_vector<U>(detail::alltoall(x.data(), x.size(), send_counts, dtype_of<U>(),
                                                recv_counts));
}

namespace detail {
handle allreduce_async(void* data, size_t count, dtype t, op o, std::string name,
                       scale_factors f = {}, std::span<const int64_t> shape = {});
} // namespace detail

/// Queues an in-place allreduce of `x`; consecutive queued allreduces are
/// fused into one (HOROVOD_FUSION_THRESHOLD, HOROVOD_CYCLE_TIME). `name`
/// identifies the tensor across ranks (named tensors pair by name, in any
/// order) and in error messages; empty:
/// "allreduce.noname.<n>", paired by call order. A name of an operation
/// still in flight on this rank (submitted, not finished) throws
/// std::invalid_argument here, as Horovod's allreduce_async raises at the
/// call. `f` as allreduce().
template <element T>
handle allreduce_async(std::span<T> x, op o = op::average, std::string name = {},
                       scale_factors f = {}) {
  return detail::allreduce_async(x.data(), x.size(), dtype_of<T>(), o, std::move(name), f);
}

/// Allreduces every tensor of `xs` in place, fused like allreduce_async.
template <element T>
void grouped_allreduce(std::span<const std::span<T>> xs, op o = op::average,
                       scale_factors f = {}) {
  std::vector<handle> hs;
  hs.reserve(xs.size());
  for (auto& x : xs)
    hs.push_back(allreduce_async(x, o, {}, f));
  for (auto& h : hs)
    synchronize(h);
}

template <element T>
void grouped_allreduce(const std::vector<std::span<T>>& xs, op o = op::average,
                       scale_factors f = {}) {
  grouped_allreduce(std::span<const std::span<T>>(xs), o, f);
}

namespace detail {

/// rows / size each, the first rows % size ranks one row more).
std::vector<size_t> reducescatter_counts(size_t count, size_t row, int ranks);

void reducescatter(const void* in, size_t count, size_t row, void* out, dtype t, op o,
                   scale_factors f, const std::string& name);
handle reducescatter_async(const void* in, size_t count, size_t row, dtype t, op o,
                           scale_factors f, std::string name,
                           const std::shared_ptr<async_result>& result);
handle allgather_async(const void* data, size_t count, dtype t, std::string name,
                       const std::shared_ptr<async_result>& result);
handle broadcast_async(void* data, size_t count, dtype t, int root, std::string name,
                       std::shared_ptr<void> keep_alive = nullptr);
handle alltoall_async(const void* data, size_t count, std::span<const int64_t> send_counts,
                      dtype t, std::string name, const std::shared_ptr<async_result>& result);

} // namespace detail

/// Horovod's reducescatter: reduces `x` (the same size on every rank)
/// across ranks with op::sum or op::average (other ops throw
/// std::invalid_argument, as Horovod's "Reducescatter currently only
/// supports AVERAGE and SUM") and returns this rank's part: of x.size()
/// elements, rank r gets x.size() / size() (+1 for the first
/// x.size() % size() ranks), in rank order. `f` as allreduce().
template <element T>
std::vector<std::remove_const_t<T>> reducescatter(std::span<T> x, op o = op::average,
                                                  scale_factors f = {}) {
  using U = std::remove_const_t<T>;
  auto counts = detail::reducescatter_counts(x.size(), 1, detail::set_size());
  std::vector<char> out(counts[static_cast<size_t>(detail::set_rank())] * sizeof(U));
  detail::reducescatter(x.data(), x.size(), 1, out.data(), dtype_of<U>(), o, f, {});
  return detail::as_vector<U>(out);
}

/// reducescatter queued: the result comes from synchronize(h). `name` as
/// allreduce_async's.
template <element T>
result_handle<T> reducescatter_async(std::span<T> x, op o = op::average, std::string name = {},
                                     scale_factors f = {}) {
  auto r = std::make_shared<detail::async_result>();
  auto h = detail::reducescatter_async(x.data(), x.size(), 1, dtype_of<std::remove_const_t<T>>(),
                                       o, f, std::move(name), r);
  return {std::move(h), std::move(r)};
}

/// reducescatter of every tensor of `xs`, negotiated together; the parts
/// in the order of `xs`.
template <element T>
std::vector<std::vector<std::remove_const_t<T>>>
grouped_reducescatter(const std::vector<std::span<T>>& xs, op o = op::average,
                      scale_factors f = {}) {
  std::vector<result_handle<T>> hs;
  for (auto& x : xs)
    hs.push_back(reducescatter_async(x, o, {}, f));
  std::vector<std::vector<std::remove_const_t<T>>> out;
  for (auto& h : hs)
    out.push_back(synchronize(h));
  return out;
}

/// allgather queued: every rank's `x` in rank order from synchronize(h).
template <element T>
result_handle<T> allgather_async(std::span<T> x, std::string name = {}) {
  auto r = std::make_shared<detail::async_result>();
  auto h = detail::allgather_async(x.data(), x.size(), dtype_of<std::remove_const_t<T>>(),
                                   std::move(name), r);
  return {std::move(h), std::move(r)};
}

/// allgather of every tensor of `xs`, negotiated together; the gathered
/// tensors in the order of `xs`.
template <element T>
std::vector<std::vector<std::remove_const_t<T>>>
grouped_allgather(const std::vector<std::span<T>>& xs) {
  std::vector<result_handle<T>> hs;
  for (auto& x : xs)
    hs.push_back(allgather_async(x));
  std::vector<std::vector<std::remove_const_t<T>>> out;
  for (auto& h : hs)
    out.push_back(synchronize(h));
  return out;
}

/// broadcast queued, in place (Horovod's broadcast_async_): `x` holds
/// root's values once synchronize(h) returned.
template <element T>
handle broadcast_async(std::span<T> x, int root, std::string name = {}) {
  return detail::broadcast_async(x.data(), x.size(), dtype_of<T>(), root, std::move(name));
}

/// alltoall queued (empty `send_counts`: size() equal parts); the parts
/// received from synchronize(h), their counts through its
/// received_splits.
template <element T>
result_handle<T> alltoall_async(std::span<T> x, std::span<const int64_t> send_counts = {},
                                std::string name = {}) {
  auto r = std::make_shared<detail::async_result>();
  auto h = detail::alltoall_async(x.data(), x.size(), send_counts,
                                  dtype_of<std::remove_const_t<T>>(), std::move(name), r);
  return {std::move(h), std::move(r)};
}

} // namespace hvactor::hvd
