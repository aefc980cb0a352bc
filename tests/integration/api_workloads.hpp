#pragma once

// Horovod's API breadth, run inside a worker (issue 31): reducescatter of
// every dtype (sync, async, grouped; sum and average; with and without
// scale factors) over fuzzed sizes, allreduce with prescale/postscale
// (synchronous, queued, fused), the async allgather / broadcast / alltoall
// paired by name in orders of each rank's own, grouped_allgather,
// broadcast_object / allgather_object, op::adasum against Adasum's formula,
// and the errors Horovod's model gives. Every result against a reference computed locally from every
// rank's inputs. Used on the shared-memory and Gloo paths
// (collectives_api_test.cpp) and the hierarchical one (hier_driver.cpp).
// Each function returns what it found wrong ("" when all is well).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include <hvactor/errors.hpp>
#include <hvactor/hvd.hpp>
#include <hvactor/hvd_objects.hpp>

#include "hvd_session.hpp"

namespace hvactor::test::api {

/// The first few problems verbatim, then a count.
class findings {
public:
  void add(const std::string& what) {
    if (++count_ <= 8)
      text_ += what + "\n";
  }
  std::string report() const {
    return count_ <= 8 ? text_ : text_ + "... " + std::to_string(count_) + " problems in all\n";
  }

private:
  std::string text_;
  int count_ = 0;
};

template <class T>
inline constexpr bool is_small_float = std::is_same_v<T, hvd::half> || std::is_same_v<T, hvd::bfloat16>;

template <class T>
double as_double(T x) {
  if constexpr (is_small_float<T>)
    return static_cast<float>(x);
  else
    return static_cast<double>(x);
}

template <class T>
T from_double(double v) {
  if constexpr (is_small_float<T>)
    return T(static_cast<float>(v));
  else
    return static_cast<T>(v);
}

/// Rank `rank`'s element `i`: small integers, exact in every dtype; never
/// negative for the unsigned type; bool is true for a third of them.
template <class T>
T input(int rank, size_t i) {
  auto r = static_cast<int64_t>(rank), k = static_cast<int64_t>(i);
  if constexpr (std::is_same_v<T, bool>)
    return (r + k) % 3 == 0;
  else if constexpr (std::is_same_v<T, uint8_t>)
    return static_cast<T>((r + 1) * (k % 5));
  else
    return from_double<T>(static_cast<double>((r + 1) * (k % 5 - 2)));
}

/// What a reduction of input(r, i) over `n` ranks gives with `o` (sum or
/// average) and `f`, step by step as the collectives compute it: each
/// rank's input scaled (integers truncate), summed, averaged (integers
/// truncate), scaled again.
template <class T>
double reference(int n, size_t i, hvd::op o, hvd::scale_factors f) {
  constexpr bool integer = std::is_integral_v<T>;
  auto cut = [](double v) { return integer ? std::trunc(v) : v; };
  if constexpr (std::is_same_v<T, bool>) {
    bool any = false;
    for (int r = 0; r < n; ++r)
      any = any || input<bool>(r, i);
    return any ? 1 : 0;
  } else {
    double sum = 0;
    for (int r = 0; r < n; ++r)
      sum += cut(as_double(input<T>(r, i)) * f.prescale_factor);
    double v = o == hvd::op::average ? cut(sum / n) : sum;
    return cut(v * f.postscale_factor);
  }
}

template <class T>
bool close(double got, double want) {
  if constexpr (std::is_integral_v<T>)
    return got == want;
  double tol = std::is_same_v<T, hvd::bfloat16> ? 1e-2
               : std::is_same_v<T, hvd::half>   ? 1e-3
               : std::is_same_v<T, float>       ? 1e-6
                                                : 1e-12;
  return std::abs(got - want) <= tol * std::max(1.0, std::abs(want));
}

/// How a test holds T's elements: bool as bytes (std::vector<bool> has no
/// contiguous storage).
template <class T>
using store_t = std::conditional_t<std::is_same_v<T, bool>, uint8_t, T>;

template <class T>
std::vector<store_t<T>> inputs(size_t count) {
  std::vector<store_t<T>> x(count);
  for (size_t i = 0; i < count; ++i)
    x[i] = static_cast<store_t<T>>(input<T>(hvd::rank(), i));
  return x;
}

template <class T>
std::span<const T> view(const std::vector<store_t<T>>& x) {
  return {reinterpret_cast<const T*>(x.data()), x.size()};
}

/// Where rank `r`'s part of a reducescatter of `count` elements begins.
inline size_t part_begin(size_t count, int r) {
  auto counts = hvd::detail::reducescatter_counts(count, 1, hvd::size());
  size_t at = 0;
  for (int k = 0; k < r; ++k)
    at += counts[static_cast<size_t>(k)];
  return at;
}

template <class T>
void check_part(findings& found, const std::string& what, const std::vector<T>& got, size_t count,
                hvd::op o, hvd::scale_factors f) {
  auto counts = hvd::detail::reducescatter_counts(count, 1, hvd::size());
  auto want_size = counts[static_cast<size_t>(hvd::rank())];
  if (got.size() != want_size) {
    found.add(what + ": " + std::to_string(got.size()) + " elements, expected " +
              std::to_string(want_size));
    return;
  }
  size_t begin = part_begin(count, hvd::rank());
  for (size_t j = 0; j < got.size(); ++j) {
    double want = reference<T>(hvd::size(), begin + j, o, f);
    double have = as_double(got[j]);
    if (!close<T>(have, want)) {
      std::ostringstream out;
      out << "rank " << hvd::rank() << ": " << what << "[" << begin + j << "] = " << have
          << ", expected " << want;
      found.add(out.str());
      return;
    }
  }
}

/// Sizes every rank draws alike: edge cases around the rank count and a
/// few random ones, small and past the shared-memory chunk.
inline std::vector<size_t> fuzzed_sizes(unsigned seed) {
  auto n = static_cast<size_t>(hvd::size());
  std::vector<size_t> sizes{0, 1, n - 1, n, n + 1, 3 * n + 2};
  std::mt19937 gen(seed);
  for (int i = 0; i < 3; ++i)
    sizes.push_back(std::uniform_int_distribution<size_t>(2, 5000)(gen));
  sizes.push_back(std::uniform_int_distribution<size_t>(100000, 300000)(gen));
  return sizes;
}

template <class T>
void reducescatter_type(findings& found, unsigned seed) {
  const char* type = hvd::to_string(hvd::dtype_of<T>());
  std::vector<hvd::scale_factors> scales{{}};
  if constexpr (!std::is_same_v<T, bool>)
    scales.push_back({.prescale_factor = 0.5, .postscale_factor = 3.0});
  for (auto count : fuzzed_sizes(seed)) {
    auto x = inputs<T>(count);
    for (auto o : {hvd::op::sum, hvd::op::average}) {
      if (std::is_same_v<T, bool> && o == hvd::op::average)
        continue;
      for (auto f : scales) {
        auto what = std::string{"reducescatter "} + type + " x " + std::to_string(count) + " " +
                    hvd::to_string(o) + (f.identity() ? "" : " scaled");
        auto got = hvd::reducescatter(view<T>(x), o, f);
        check_part(found, what, got, count, o, f);
      }
    }
  }
}

/// Every dtype, sum and average, with and without scale factors, over
/// fuzzed sizes (the same on every rank).
inline std::string reducescatter_every_dtype(unsigned seed) {
  findings found;
  reducescatter_type<float>(found, seed);
  reducescatter_type<double>(found, seed);
  reducescatter_type<int32_t>(found, seed);
  reducescatter_type<int64_t>(found, seed);
  reducescatter_type<hvd::half>(found, seed);
  reducescatter_type<hvd::bfloat16>(found, seed);
  reducescatter_type<int16_t>(found, seed);
  reducescatter_type<int8_t>(found, seed);
  reducescatter_type<uint8_t>(found, seed);
  reducescatter_type<bool>(found, seed);
  return found.report();
}

template <class T>
void check_allreduced(findings& found, const std::string& what, const std::vector<T>& got,
                      hvd::op o, hvd::scale_factors f) {
  for (size_t i = 0; i < got.size(); ++i) {
    double want = reference<T>(hvd::size(), i, o, f);
    if (!close<T>(as_double(got[i]), want)) {
      std::ostringstream out;
      out << "rank " << hvd::rank() << ": " << what << "[" << i << "] = " << as_double(got[i])
          << ", expected " << want;
      found.add(out.str());
      return;
    }
  }
}

/// allreduce with scale factors: synchronous (small: the one-step path;
/// large), 40 queued ones with factors of their own fused together,
/// grouped, and reducescatter_async / grouped_reducescatter submitted in
/// an order of each rank's own (paired by name).
inline std::string scaled_and_async_reductions(unsigned seed) {
  findings found;
  hvd::scale_factors f{.prescale_factor = 0.25, .postscale_factor = 4.0};
  for (size_t count : {size_t{3}, size_t{5000}, size_t{200001}}) {
    auto xf = inputs<float>(count);
    hvd::allreduce(std::span<float>(xf), hvd::op::average, f);
    check_allreduced(found, "allreduce float scaled x " + std::to_string(count), xf,
                     hvd::op::average, f);
    auto xi = inputs<int32_t>(count);
    hvd::allreduce(std::span<int32_t>(xi), hvd::op::sum, f);
    check_allreduced(found, "allreduce int32 scaled x " + std::to_string(count), xi,
                     hvd::op::sum, f);
  }
  // Fused: every tensor its own factors (the batch scales each entry).
  std::vector<std::vector<double>> ts;
  std::vector<hvd::scale_factors> fs;
  std::vector<hvd::handle> hs;
  for (size_t i = 0; i < 40; ++i) {
    ts.push_back(inputs<double>(1 + i * 13));
    fs.push_back({.prescale_factor = 1.0 + static_cast<double>(i % 3),
                  .postscale_factor = 0.5 * static_cast<double>(1 + i % 4)});
  }
  for (size_t i = 0; i < ts.size(); ++i)
    hs.push_back(hvd::allreduce_async(std::span<double>(ts[i]), i % 2 ? hvd::op::sum
                                                                       : hvd::op::average,
                                      "scaled." + std::to_string(i), fs[i]));
  for (size_t i = 0; i < ts.size(); ++i) {
    hvd::synchronize(hs[i]);
    check_allreduced(found, "fused scaled." + std::to_string(i), ts[i],
                     i % 2 ? hvd::op::sum : hvd::op::average, fs[i]);
  }
  std::vector<std::vector<int64_t>> gs{inputs<int64_t>(10), inputs<int64_t>(3000)};
  std::vector<std::span<int64_t>> spans{gs[0], gs[1]};
  hvd::grouped_allreduce(spans, hvd::op::sum, f);
  for (auto& g : gs)
    check_allreduced(found, "grouped int64 scaled", g, hvd::op::sum, f);

  // Named async reducescatters, submitted in an order of each rank's own.
  std::vector<size_t> sizes{17, 1, 4096, 70003, 0, 333};
  std::vector<std::vector<float>> in;
  for (auto s : sizes)
    in.push_back(inputs<float>(s));
  std::vector<size_t> order(sizes.size());
  for (size_t i = 0; i < order.size(); ++i)
    order[i] = i;
  std::mt19937 gen(seed * 131 + static_cast<unsigned>(hvd::rank()));
  std::shuffle(order.begin(), order.end(), gen);
  std::vector<hvd::result_handle<const float>> rs(sizes.size());
  for (auto i : order)
    rs[i] = hvd::reducescatter_async(std::span<const float>(in[i]), hvd::op::sum,
                                     "rs." + std::to_string(i), f);
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (rs[i].name() != "rs." + std::to_string(i))
      found.add("reducescatter_async handle named '" + rs[i].name() + "'");
    check_part(found, "reducescatter_async rs." + std::to_string(i), hvd::synchronize(rs[i]),
               sizes[i], hvd::op::sum, f);
  }
  std::vector<std::vector<int32_t>> g2{inputs<int32_t>(9), inputs<int32_t>(1000)};
  std::vector<std::span<const int32_t>> g2s{g2[0], g2[1]};
  auto parts = hvd::grouped_reducescatter(g2s, hvd::op::average);
  if (parts.size() != 2)
    found.add("grouped_reducescatter returned " + std::to_string(parts.size()) + " parts");
  else
    for (size_t i = 0; i < 2; ++i)
      check_part(found, "grouped_reducescatter " + std::to_string(i), parts[i], g2[i].size(),
                 hvd::op::average, {});
  return found.report();
}

/// allgather_async (sizes differ per rank) and alltoall_async with splits,
/// named and submitted in an order of each rank's own, an unnamed
/// broadcast_async between them, and grouped_allgather.
inline std::string async_gathers(unsigned seed) {
  findings found;
  const int me = hvd::rank(), n = hvd::size();
  auto mine = [](int r, size_t i) { return static_cast<int64_t>(r * 1000 + static_cast<int>(i)); };
  std::vector<std::vector<int64_t>> g(4);
  for (size_t i = 0; i < g.size(); ++i)
    for (size_t j = 0; j < i * 3 + static_cast<size_t>(me); ++j)
      g[i].push_back(mine(me, j));
  std::vector<size_t> order{0, 1, 2, 3};
  std::mt19937 gen(seed + static_cast<unsigned>(me) * 7);
  std::shuffle(order.begin(), order.end(), gen);
  std::vector<hvd::result_handle<int64_t>> ag(g.size());
  for (auto i : order)
    ag[i] = hvd::allgather_async(std::span<int64_t>(g[i]), "ag." + std::to_string(i));
  std::vector<double> b(100, me == n - 1 ? 7.5 : -1.0);
  auto bh = hvd::broadcast_async(std::span<double>(b), n - 1);
  // alltoall: rank me sends (dest + 1) elements to each dest.
  std::vector<int64_t> send, splits;
  for (int d = 0; d < n; ++d) {
    splits.push_back(d + 1);
    for (int k = 0; k <= d; ++k)
      send.push_back(me * 100 + d);
  }
  auto at = hvd::alltoall_async(std::span<const int64_t>(send), splits, "a2a");
  for (size_t i = 0; i < g.size(); ++i) {
    auto got = hvd::synchronize(ag[i]);
    std::vector<int64_t> want;
    for (int r = 0; r < n; ++r)
      for (size_t j = 0; j < i * 3 + static_cast<size_t>(r); ++j)
        want.push_back(mine(r, j));
    if (got != want)
      found.add("allgather_async ag." + std::to_string(i) + " on rank " + std::to_string(me) +
                ": " + std::to_string(got.size()) + " elements, expected " +
                std::to_string(want.size()));
  }
  hvd::synchronize(bh);
  if (std::any_of(b.begin(), b.end(), [](double v) { return v != 7.5; }))
    found.add("broadcast_async: not root's values on rank " + std::to_string(me));
  std::vector<int64_t> recv_splits;
  auto got = hvd::synchronize(at, &recv_splits);
  std::vector<int64_t> want;
  for (int r = 0; r < n; ++r)
    for (int k = 0; k <= me; ++k)
      want.push_back(r * 100 + me);
  if (got != want || recv_splits != std::vector<int64_t>(static_cast<size_t>(n), me + 1))
    found.add("alltoall_async on rank " + std::to_string(me) + ": wrong parts or splits");
  if (at.name() != "a2a" || bh.name().rfind("broadcast.noname.", 0) != 0)
    found.add("async handle names: '" + at.name() + "', '" + bh.name() + "'");
  std::vector<std::vector<float>> gg{std::vector<float>(static_cast<size_t>(me + 1), 1.0f * me),
                                     std::vector<float>(2, 2.0f * me)};
  std::vector<std::span<float>> ggs{gg[0], gg[1]};
  auto gathered = hvd::grouped_allgather(ggs);
  std::vector<float> w0, w1;
  for (int r = 0; r < n; ++r) {
    w0.insert(w0.end(), static_cast<size_t>(r + 1), 1.0f * r);
    w1.insert(w1.end(), 2, 2.0f * r);
  }
  if (gathered.size() != 2 || gathered[0] != w0 || gathered[1] != w1)
    found.add("grouped_allgather on rank " + std::to_string(me) + ": wrong result");
  return found.report();
}

/// A value whose serialization fails when poisoned (CAF's inspector gets
/// an error): a rank that cannot serialize its object must fail every rank,
/// not leave them waiting.
struct poisoned {
  bool poison = false;
  int32_t value = 0;
  template <class Inspector>
  friend typename Inspector::result_type inspect(Inspector& f, poisoned& x) {
    if (x.poison)
      return caf::make_error(caf::sec::invalid_argument);
    return f(caf::meta::type_name("poisoned"), x.value);
  }
};

/// broadcast_object of a map from the last rank, allgather_object of
/// strings of each rank's own length; an object that cannot be serialized
/// fails every rank, naming the rank.
inline std::string objects() {
  findings found;
  const int me = hvd::rank(), n = hvd::size();
  std::map<std::string, std::vector<int32_t>> m;
  if (me == n - 1)
    m = {{"epoch", {3}}, {"lr", {1, 2, 3}}, {"empty", {}}};
  auto got = hvd::broadcast_object(m, n - 1);
  if (got.size() != 3 || got["lr"] != std::vector<int32_t>{1, 2, 3} || got["epoch"][0] != 3)
    found.add("broadcast_object on rank " + std::to_string(me) + ": wrong map");
  auto all = hvd::allgather_object(std::string(static_cast<size_t>(me) * 5, 'a' + static_cast<char>(me)));
  if (all.size() != static_cast<size_t>(n))
    found.add("allgather_object: " + std::to_string(all.size()) + " objects");
  else
    for (int r = 0; r < n; ++r)
      if (all[static_cast<size_t>(r)] != std::string(static_cast<size_t>(r) * 5, 'a' + static_cast<char>(r)))
        found.add("allgather_object: rank " + std::to_string(r) + "'s string differs");
  try {
    hvd::broadcast_object(poisoned{me == 0, 1}, 0);
    found.add("broadcast_object of a poisoned root object: no error");
  } catch (const hvactor::error& e) {
    if (std::string{e.what()}.find("root rank 0 could not serialize its object") == std::string::npos)
      found.add(std::string{"broadcast_object poisoned: "} + e.what());
  }
  try {
    hvd::allgather_object(poisoned{me == n - 1, 2});
    found.add("allgather_object with a poisoned object: no error");
  } catch (const hvactor::error& e) {
    if (std::string{e.what()}.find("rank " + std::to_string(n - 1) + " could not serialize") ==
        std::string::npos)
      found.add(std::string{"allgather_object poisoned: "} + e.what());
  }
  return found.report();
}

/// Bad calls: refused locally with std::invalid_argument before anything
/// is queued (every rank alike), or, for factors that differ between
/// ranks, a collective_error on every rank; the collectives stay usable.
inline std::string refusals() {
  findings found;
  std::vector<float> x(8, 1.0f);
  auto expect_invalid = [&](const char* what, auto&& call, const char* part) {
    try {
      call();
      found.add(std::string{what} + ": no error");
    } catch (const std::invalid_argument& e) {
      if (std::string{e.what()}.find(part) == std::string::npos)
        found.add(std::string{what} + ": " + e.what());
    }
  };
  expect_invalid("reducescatter max", [&] {
    hvd::reducescatter(std::span<float>(x), hvd::op::max);
  }, "Reducescatter currently only supports AVERAGE and SUM");
  expect_invalid("NaN prescale", [&] {
    hvd::allreduce(std::span<float>(x), hvd::op::sum, {.prescale_factor = std::nan("")});
  }, "must be finite");
  bool bs[3] = {true, false, true};
  expect_invalid("bool scaled", [&] {
    hvd::allreduce(std::span<bool>(bs), hvd::op::sum, {.postscale_factor = 2});
  }, "bool tensors take no prescale_factor");
  // Factors that differ between ranks: every rank fails, naming them.
  try {
    hvd::allreduce(std::span<float>(x), hvd::op::sum,
                   {.prescale_factor = hvd::rank() == 0 ? 1.0 : 2.0});
    found.add("mismatched prescale factors: no error on rank " + std::to_string(hvd::rank()));
  } catch (const hvactor::error& e) {
    if (std::string{e.what()}.find("Mismatched prescale and/or postscale factors")
        == std::string::npos)
      found.add(std::string{"mismatched prescale factors: "} + e.what());
  }
  std::vector<float> y(5, 1.0f);
  hvd::allreduce(std::span<float>(y), hvd::op::sum);
  if (y[0] != static_cast<float>(hvd::size()))
    found.add("allreduce after a refused call: " + std::to_string(y[0]));
  return found.report();
}

/// Rank r's element i of the Adasum checks: distinct directions per rank,
/// within float16's range.
inline double adasum_input(int r, size_t i) {
  return std::sin(7.0 * r + 0.37 * static_cast<double>(i)) * (1.0 + 0.5 * r);
}

/// Adasum's formula evaluated directly, in double, over the tree of pairs
/// (0,1), (2,3), ..., then pairs of pairs: what every rank must get.
inline std::vector<double> adasum_reference(int n, size_t count, double scale) {
  std::vector<std::vector<double>> v(static_cast<size_t>(n), std::vector<double>(count));
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < count; ++i)
      v[static_cast<size_t>(r)][i] = scale * adasum_input(r, i);
  for (int level = 1; level < n; level *= 2)
    for (int g = 0; g < n; g += 2 * level) {
      auto& a = v[static_cast<size_t>(g)];
      auto& b = v[static_cast<size_t>(g + level)];
      double ab = 0, aa = 0, bb = 0;
      for (size_t i = 0; i < count; ++i) {
        ab += a[i] * b[i];
        aa += a[i] * a[i];
        bb += b[i] * b[i];
      }
      double ca = aa > 0 ? 1 - ab / (2 * aa) : 1, cb = bb > 0 ? 1 - ab / (2 * bb) : 1;
      for (size_t i = 0; i < count; ++i)
        a[i] = ca * a[i] + cb * b[i];
    }
  return v[0];
}

template <class T>
void check_adasum(findings& found, const std::string& what, const std::vector<T>& got,
                  double scale) {
  auto want = adasum_reference(hvd::size(), got.size(), scale);
  double tol = std::is_same_v<T, hvd::half> ? 2e-2 : std::is_same_v<T, float> ? 1e-5 : 1e-12;
  for (size_t i = 0; i < got.size(); ++i)
    if (std::abs(as_double(got[i]) - want[i]) > tol * std::max(1.0, std::abs(want[i]))) {
      std::ostringstream out;
      out << "rank " << hvd::rank() << ": " << what << "[" << i << "] = " << as_double(got[i])
          << ", Adasum's formula gives " << want[i];
      found.add(out.str());
      return;
    }
}

template <class T>
std::vector<T> adasum_inputs(size_t count, double scale = 1.0) {
  std::vector<T> x(count);
  for (size_t i = 0; i < count; ++i)
    x[i] = from_double<T>(scale * adasum_input(hvd::rank(), i));
  return x;
}

/// op::adasum (Horovod's Adasum) against its formula: every float type,
/// sizes that split unevenly at every level, named async tensors in an
/// order of each rank's own (each combined with its own coefficients),
/// prescaled; refused for other types, for reducescatter, and on a number
/// of ranks that is not a power of 2.
inline std::string adasum_checks(unsigned seed) {
  findings found;
  int n = hvd::size();
  std::vector<double> x{1, 2};
  if ((n & (n - 1)) != 0) {
    try {
      hvd::allreduce(std::span<double>(x), hvd::op::adasum);
      found.add("adasum on " + std::to_string(n) + " ranks: no error");
    } catch (const std::invalid_argument& e) {
      if (std::string{e.what()}.find("non-power of 2 ranks is not supported") == std::string::npos)
        found.add(std::string{"adasum on 3 ranks: "} + e.what());
    }
    return found.report();
  }
  for (size_t count : {size_t{1}, size_t{2}, size_t{3}, size_t{17}, size_t{1001}, size_t{70001}}) {
    auto f = adasum_inputs<float>(count);
    hvd::allreduce(std::span<float>(f), hvd::op::adasum);
    check_adasum(found, "adasum float32 x " + std::to_string(count), f, 1.0);
    auto d = adasum_inputs<double>(count);
    hvd::allreduce(std::span<double>(d), hvd::op::adasum);
    check_adasum(found, "adasum float64 x " + std::to_string(count), d, 1.0);
    auto h = adasum_inputs<hvd::half>(count);
    hvd::allreduce(std::span<hvd::half>(h), hvd::op::adasum);
    check_adasum(found, "adasum float16 x " + std::to_string(count), h, 1.0);
  }
  std::vector<std::vector<double>> ts;
  std::vector<size_t> order;
  for (size_t i = 0; i < 5; ++i) {
    ts.push_back(adasum_inputs<double>(10 + 333 * i));
    order.push_back(i);
  }
  std::mt19937 gen(seed + 17u * static_cast<unsigned>(hvd::rank()));
  std::shuffle(order.begin(), order.end(), gen);
  std::vector<hvd::handle> hs(ts.size());
  for (auto i : order)
    hs[i] = hvd::allreduce_async(std::span<double>(ts[i]), hvd::op::adasum, "ada." + std::to_string(i),
                                 {.prescale_factor = i == 2 ? 2.0 : 1.0});
  for (size_t i = 0; i < ts.size(); ++i) {
    hvd::synchronize(hs[i]);
    check_adasum(found, "async adasum ada." + std::to_string(i), ts[i], i == 2 ? 2.0 : 1.0);
  }
  std::vector<int32_t> ints(4, 1);
  try {
    hvd::allreduce(std::span<int32_t>(ints), hvd::op::adasum);
    found.add("adasum of int32: no error");
  } catch (const std::invalid_argument& e) {
    if (std::string{e.what()}.find("supports float16, float32 and float64") == std::string::npos)
      found.add(std::string{"adasum of int32: "} + e.what());
  }
  try {
    hvd::reducescatter(std::span<double>(x), hvd::op::adasum);
    found.add("reducescatter with adasum: no error");
  } catch (const std::invalid_argument&) {
  }
  return found.report();
}

/// All of the above in one job; "" when all is well.
inline std::string everything(unsigned seed) {
  hvd_session s;
  std::string out;
  out += reducescatter_every_dtype(seed);
  out += scaled_and_async_reductions(seed);
  out += async_gathers(seed);
  out += objects();
  out += refusals();
  out += adasum_checks(seed);
  return out;
}

} // namespace hvactor::test::api
