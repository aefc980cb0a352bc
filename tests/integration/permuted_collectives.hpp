#pragma once

// A workload for negotiation by name, run inside a worker: 60 named async
// allreduces of mixed sizes, dtypes and reductions, submitted in an order of
// each rank's own, with synchronous broadcasts and allgathers in between;
// every result checked exactly against a reference computed from every
// rank's inputs. Used on the shared-memory and Gloo paths
// (negotiation_test.cpp) and the hierarchical one (hier_driver.cpp).

#include <algorithm>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include <hvactor/hvd.hpp>

#include "hvd_session.hpp"

namespace hvactor::test {

namespace permuted_detail {

using tensor = std::variant<std::vector<int32_t>, std::vector<int64_t>, std::vector<float>,
                            std::vector<double>>;

/// Tensor i's elements on `rank`: small integers, exact in every dtype.
template <class T>
std::vector<T> values(size_t i, int rank) {
  size_t len = 1 + (i * 37) % 300 + (i % 9 == 0 ? 5000 : 0);
  std::vector<T> v(len);
  for (size_t j = 0; j < len; ++j)
    v[j] = static_cast<T>(
      static_cast<int64_t>((i * 7 + j * 3 + static_cast<size_t>(rank) * 11) % 101) - 50);
  return v;
}

/// Tensor i on `rank`; its dtype cycles through int32, int64, float, double.
inline tensor make(size_t i, int rank) {
  switch (i % 4) {
    case 0:
      return values<int32_t>(i, rank);
    case 1:
      return values<int64_t>(i, rank);
    case 2:
      return values<float>(i, rank);
    default:
      return values<double>(i, rank);
  }
}

/// Tensor i's reduction: sum, max and min in turn.
inline hvd::op op_of(size_t i) {
  return std::vector<hvd::op>{hvd::op::sum, hvd::op::max, hvd::op::min}[i % 3];
}

/// What tensor i must become, from every rank's values.
inline tensor expected(size_t i, int size) {
  auto out = make(i, 0);
  for (int r = 1; r < size; ++r) {
    auto other = make(i, r);
    std::visit(
      [&](auto& acc) {
        auto& o = std::get<std::decay_t<decltype(acc)>>(other);
        for (size_t j = 0; j < acc.size(); ++j)
          acc[j] = op_of(i) == hvd::op::sum   ? acc[j] + o[j]
                   : op_of(i) == hvd::op::max ? std::max(acc[j], o[j])
                                              : std::min(acc[j], o[j]);
      },
      out);
  }
  return out;
}

} // namespace permuted_detail

/// The workload in an initialized hvd session: 60 named async allreduces
/// ("t/<i>") submitted in an order of this rank's own (seeded by `seed` and
/// the rank), a synchronous broadcast and allgather after every 15
/// submissions, the handles synchronized in yet another order. Returns what
/// differs from the reference ("" when nothing).
inline std::string permuted_ops(int seed) {
  using namespace permuted_detail;
  constexpr size_t n = 60;
  int rank = hvd::rank(), size = hvd::size();
  std::mt19937 rng(static_cast<unsigned>(seed * 1000 + rank));
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i)
    order[i] = i;
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<tensor> tensors(n);
  std::vector<hvd::handle> handles(n);
  std::string problems;
  for (size_t k = 0; k < n; ++k) {
    auto i = order[k];
    tensors[i] = make(i, rank);
    std::visit(
      [&](auto& v) {
        handles[i] = hvd::allreduce_async(std::span(v), op_of(i), "t/" + std::to_string(i));
      },
      tensors[i]);
    if (k % 15 == 14) {
      std::vector<int64_t> b(3, rank);
      hvd::broadcast(std::span<int64_t>(b), static_cast<int>(k / 15) % size);
      if (b != std::vector<int64_t>(3, static_cast<int64_t>(k / 15) % size))
        problems += "broadcast after " + std::to_string(k) + " wrong; ";
      std::vector<int32_t> mine(static_cast<size_t>(rank) + 1, rank);
      auto all = hvd::allgather(std::span<const int32_t>(mine));
      std::vector<int32_t> want;
      for (int r = 0; r < size; ++r)
        want.insert(want.end(), static_cast<size_t>(r) + 1, r);
      if (all != want)
        problems += "allgather after " + std::to_string(k) + " differs (" +
                    std::to_string(all.size()) + " elements, " + std::to_string(want.size()) +
                    " expected); ";
    }
  }
  std::shuffle(order.begin(), order.end(), rng);
  for (auto i : order) {
    hvd::synchronize(handles[i]);
    if (tensors[i] != expected(i, size))
      problems += "tensor t/" + std::to_string(i) + " differs; ";
  }
  return problems;
}

/// permuted_ops in a session of its own (hvd::init ... hvd::shutdown).
inline std::string permuted(int seed) {
  hvd_session s;
  return permuted_ops(seed);
}

} // namespace hvactor::test
